// unscale_and_check: grid.y indexes up to kMaxGrads gradients of one launch (pointers in the
// kernel's parameter block), grid.x strides over each one's elements. The flag write is a
// plain store of 1.0f from any thread that sees a non-finite value (every writer stores the
// same value, so the result does not depend on ordering).
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/loss_scale.cuh"

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::from_acc;
using detail::to_acc;

constexpr int kMaxGrads = 96;

struct GradBatch {
  void* g[kMaxGrads];
  int64_t n[kMaxGrads];
};
static_assert(sizeof(GradBatch) < 4000, "kernel parameters are limited to 4 KiB");

__device__ __forceinline__ bool finite(float v) { return isfinite(v); }
__device__ __forceinline__ bool finite(double v) { return isfinite(v); }

template <typename T>
__global__ void unscale_kernel(GradBatch b, float inv_scale, float* found_inf) {
  using A = acc_t<T>;
  T* g = static_cast<T*>(b.g[blockIdx.y]);
  const int64_t n = b.n[blockIdx.y];
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const A v = to_acc(g[i]);
    bad |= !finite(v);
    if (inv_scale != 1.0f) g[i] = from_acc<T>(v * A(inv_scale));
  }
  // Several blocks may find one: an atomic store, so the flag is not a data race between
  // blocks (a plain store of the same value works on hardware, but ThreadSanitizer under
  // --config=cuda-emu-tsan rightly calls it one).
  if (bad) atomicExch(found_inf, 1.0f);
}

constexpr int kThreads = 256;
constexpr int kMaxBlocksX = 1024;

}  // namespace

void unscale_and_check(DType t, const std::vector<void*>& grads, const std::vector<int64_t>& n, float inv_scale,
                       float* found_inf, cudaStream_t s) {
  RT_CHECK(grads.size() == n.size(), "unscale_and_check: ", grads.size(), " gradients but ", n.size(), " sizes");
  RT_CHECK(found_inf != nullptr, "unscale_and_check: null found_inf");
  for (size_t i = 0; i < n.size(); ++i) {
    RT_CHECK(n[i] >= 0, "unscale_and_check: negative element count ", n[i]);
    RT_CHECK(n[i] == 0 || grads[i] != nullptr, "unscale_and_check: null gradient");
  }
  detail::dispatch_floating(t, "unscale_and_check", [&](auto z) {
    using T = decltype(z);
    for (size_t first = 0; first < grads.size(); first += kMaxGrads) {
      const size_t k = std::min<size_t>(kMaxGrads, grads.size() - first);
      GradBatch b{};
      int64_t max_n = 0;
      for (size_t j = 0; j < k; ++j) {
        b.g[j] = grads[first + j];
        b.n[j] = n[first + j];
        max_n = std::max(max_n, n[first + j]);
      }
      if (max_n == 0) continue;
      const dim3 grid(std::min(detail::grid_for(max_n, kThreads), kMaxBlocksX), unsigned(k));
      RT_LAUNCH(grid, kThreads, 0, s, unscale_kernel<T>)(b, inv_scale, found_inf);
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace rt::cuda
