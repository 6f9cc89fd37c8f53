// dropout: one thread per element (grid-stride over memory order), each computing its
// logical index and from it its own splitmix64 draw (Note [Dropout mask] in
// kernels/cpu/dropout.h); the draw, the uniform and the comparison are exact integer and
// correctly rounded steps, so the mask equals the CPU's bit for bit.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dropout.h"

namespace rt::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

// splitmix64 draw k after `state`, as uniform in [0, 1): Generator::next_u64 and uniform
// (engine/random.cc; the same constants as kernels/cuda/random.cu).
__device__ __forceinline__ double uniform_draw(uint64_t state, uint64_t k) {
  uint64_t z = state + (k + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return __dmul_rn(__ull2double_rn(z >> 11), 0x1.0p-53);
}

template <typename T>
__device__ __forceinline__ double widen(T v) {
  return double(detail::to_acc(v));
}

template <typename T>
__global__ void dropout_kernel(uint64_t state, int64_t total, int64_t C, int64_t H, int64_t W, bool nhwc, double p,
                               double scale, const T* x, T* y) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total; j += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = j;
    if (nhwc) {  // NHWC offset j -> logical NCHW index
      const int64_t c = j % C, q = j / C, w = q % W, r = q / W, h = r % H, n = r / H;
      i = ((n * C + c) * H + h) * W + w;
    }
    const double v = __dmul_rn(widen(x[j]), uniform_draw(state, uint64_t(i)) >= p ? scale : 0.0);
    y[j] = detail::from_acc<T>(detail::acc_t<T>(v));
  }
}

// ---- launcher --------------------------------------------------------------------------

constexpr int kThreads = 256;

}  // namespace

void dropout(DType t, uint64_t state, const RandomLayout& at, double p, double scale, const void* x, void* y,
             cudaStream_t s) {
  RT_CHECK(at.N >= 0 && at.C >= 0 && at.H >= 0 && at.W >= 0, "dropout: negative extent (", at.N, ", ", at.C, ", ",
           at.H, ", ", at.W, ")");
  detail::dispatch_floating(t, "dropout", [&](auto z) {
    using T = decltype(z);
    const int64_t n = at.N * at.C * at.H * at.W;
    if (n == 0) return;
    RT_CHECK(x != nullptr && y != nullptr, "dropout: null pointer");
    RT_LAUNCH(detail::grid_for(n, kThreads), kThreads, 0, s, dropout_kernel<T>)(
        state, n, at.C, at.H, at.W, at.channels_last, p, scale, static_cast<const T*>(x), static_cast<T*>(y));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace rt::cuda
