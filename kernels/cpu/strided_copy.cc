#include "kernels/cpu/strided_copy.h"

#include <cstring>

#include "base/error.h"
#include "kernels/cpu/parallel.h"

namespace rt::cpu {
namespace {

// One row (the last dim) per parallel item; the row's start offsets from its index.
template <typename E>
void copy_rows(int ndim, const int64_t* size, const int64_t* ss, const int64_t* ds, const E* src, E* dst) {
  const int last = ndim - 1;
  const int64_t len = size[last], sl = ss[last], dl = ds[last];
  int64_t rows = 1;
  for (int k = 0; k < last; ++k) rows *= size[k];
  parallel_range(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          int64_t rem = r, so = 0, dof = 0;
          for (int k = last - 1; k >= 0; --k) {
            const int64_t i = rem % size[k];
            rem /= size[k];
            so += i * ss[k];
            dof += i * ds[k];
          }
          const E* s = src + so;
          E* d = dst + dof;
          if (sl == 1 && dl == 1) {
            std::memcpy(d, s, size_t(len) * sizeof(E));
          } else {
            for (int64_t j = 0; j < len; ++j) d[j * dl] = s[j * sl];
          }
        }
      },
      len);
}

}  // namespace

void strided_copy(size_t elem_bytes, int ndim, const int64_t* size, const int64_t* ss, const int64_t* ds,
                  const void* src, void* dst) {
  RT_CHECK(ndim >= 0, "strided_copy: negative ndim ", ndim);
  for (int k = 0; k < ndim; ++k) {
    RT_CHECK(size[k] >= 0, "strided_copy: negative size ", size[k], " in dim ", k);
    if (size[k] == 0) return;
  }
  if (ndim == 0) {
    std::memcpy(dst, src, elem_bytes);
    return;
  }
  switch (elem_bytes) {
    case 1: return copy_rows(ndim, size, ss, ds, static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst));
    case 2: return copy_rows(ndim, size, ss, ds, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst));
    case 4: return copy_rows(ndim, size, ss, ds, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst));
    case 8: return copy_rows(ndim, size, ss, ds, static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst));
    default: RT_FAIL("strided_copy: element size ", elem_bytes, " is not 1, 2, 4 or 8 bytes");
  }
}

}  // namespace rt::cpu
