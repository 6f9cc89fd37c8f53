// strided_copy: one thread per element (grid-stride), the index split into per-dim
// coordinates from the last dim, both offsets summed from them. Bits are moved, never
// converted, so one kernel per element size serves every dtype.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/strided_copy.h"

namespace rt::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

struct CopyDims {
  int ndim;
  int64_t size[kMaxCopyDims], src[kMaxCopyDims], dst[kMaxCopyDims];
};

template <typename E>
__global__ void strided_copy_kernel(CopyDims d, int64_t total, const E* __restrict__ src, E* __restrict__ dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i, so = 0, dof = 0;
    RT_UNROLL
    for (int k = kMaxCopyDims - 1; k >= 0; --k) {
      if (k < d.ndim) {
        const int64_t c = rem % d.size[k];
        rem /= d.size[k];
        so += c * d.src[k];
        dof += c * d.dst[k];
      }
    }
    dst[dof] = src[so];
  }
}

// ---- launchers -------------------------------------------------------------------------

constexpr int kThreads = 256;

template <typename E>
void launch(const CopyDims& d, int64_t total, const void* src, void* dst, cudaStream_t s) {
  RT_LAUNCH(detail::grid_for(total, kThreads), kThreads, 0, s, strided_copy_kernel<E>)(d, total, static_cast<const E*>(src),
                                                                               static_cast<E*>(dst));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void strided_copy(size_t elem_bytes, int ndim, const int64_t* size, const int64_t* src_stride,
                  const int64_t* dst_stride, const void* src, void* dst, cudaStream_t s) {
  RT_CHECK(ndim >= 0 && ndim <= kMaxCopyDims, "strided_copy: ", ndim, " dims; at most ", kMaxCopyDims);
  CopyDims d{};
  d.ndim = ndim;
  int64_t total = 1;
  for (int k = 0; k < ndim; ++k) {
    RT_CHECK(size[k] >= 0, "strided_copy: negative size ", size[k], " in dim ", k);
    d.size[k] = size[k];
    d.src[k] = src_stride[k];
    d.dst[k] = dst_stride[k];
    total *= size[k];
  }
  if (total == 0) return;
  RT_CHECK(src != nullptr && dst != nullptr, "strided_copy: null pointer");
  switch (elem_bytes) {
    case 1: return launch<uint8_t>(d, total, src, dst, s);
    case 2: return launch<uint16_t>(d, total, src, dst, s);
    case 4: return launch<uint32_t>(d, total, src, dst, s);
    case 8: return launch<uint64_t>(d, total, src, dst, s);
    default: RT_FAIL("strided_copy: element size ", elem_bytes, " is not 1, 2, 4 or 8 bytes");
  }
}

}  // namespace rt::cuda
