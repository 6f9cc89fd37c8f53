// The memory-layout helpers of engine/ops/strided.h.
#include "engine/ops/strided.h"

#include <algorithm>
#include <numeric>

#include "engine/ops/op_util.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cuda/strided_copy.h"

namespace rt::ops {

std::vector<int> memory_order(const Tensor& x) {
  if (x.format() == MemoryFormat::channels_last) return {0, 2, 3, 1};
  std::vector<int> order(size_t(x.ndim()));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

int wrap_dim(int dim, int ndim, const char* op) {
  RT_CHECK(dim >= -ndim && dim < ndim, op, ": dim ", dim, " is out of range for a ", ndim, "-D tensor (expected [",
           -ndim, ", ", ndim, "))");
  return dim < 0 ? dim + ndim : dim;
}

Around around_dim(const Tensor& x, int dim) {
  const std::vector<int> order = memory_order(x);
  Around a;
  bool after = false;
  for (int d : order) {
    const int64_t s = x.size(d);
    if (d == dim) {
      a.n = s;
      after = true;
    } else if (after) {
      a.inner *= s;
    } else {
      a.outer *= s;
    }
  }
  return a;
}

void strided_copy(const Shape& shape, const Tensor& src, int64_t src_offset, const std::vector<int64_t>& src_strides,
                  const Tensor& dst, int64_t dst_offset, const std::vector<int64_t>& dst_strides) {
  RT_CHECK(src.dtype() == dst.dtype() && src.device() == dst.device(), "strided_copy: ", src.str(), " -> ",
           dst.str(), " changes dtype or device");
  RT_CHECK(src_strides.size() == shape.size() && dst_strides.size() == shape.size(),
           "strided_copy: strides do not match shape ", shape_str(shape));
  struct Dim {
    int64_t size, ss, ds;
  };
  std::vector<Dim> dims;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0) return;
    if (shape[k] != 1) dims.push_back({shape[k], src_strides[k], dst_strides[k]});
  }
  // Walk dst in memory order (its smallest stride last), then merge dims that are one run
  // in both tensors: (outer, inner) with outer stride = inner stride * inner size.
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.ds > b.ds; });
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& o = merged.back();
      if (o.ss == d.ss * d.size && o.ds == d.ds * d.size) {
        o = {o.size * d.size, d.ss, d.ds};
        continue;
      }
    }
    merged.push_back(d);
  }
  const int n = int(merged.size());
  RT_CHECK(n <= cuda::kMaxCopyDims, "strided_copy: ", n, " dims after merging ", shape_str(shape), "; at most ",
           cuda::kMaxCopyDims);
  int64_t size[cuda::kMaxCopyDims], ss[cuda::kMaxCopyDims], ds[cuda::kMaxCopyDims];
  for (int k = 0; k < n; ++k) size[k] = merged[k].size, ss[k] = merged[k].ss, ds[k] = merged[k].ds;
  const size_t es = dtype_size(src.dtype());
  const void* s = static_cast<const char*>(src.raw_data()) + src_offset * int64_t(es);
  void* d = static_cast<char*>(dst.raw_data()) + dst_offset * int64_t(es);
  if (dst.device().is_cuda()) {
    cuda::strided_copy(es, n, size, ss, ds, s, d, stream_of(dst));
  } else {
    cpu::strided_copy(es, n, size, ss, ds, s, d);
  }
}

Tensor gather_copy(const Tensor& src, const Shape& shape, int64_t src_offset, const std::vector<int64_t>& src_strides,
                   MemoryFormat format) {
  Tensor out = Tensor::empty(shape, src.dtype(), src.device(), shape.size() == 4 ? format : MemoryFormat::contiguous);
  strided_copy(shape, src, src_offset, src_strides, out, 0, strides(out));
  return out;
}

}  // namespace rt::ops
