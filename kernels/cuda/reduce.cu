// sum: two-pass block reduction with a fixed grid (deterministic).
//
// Pass 1: kSumBlocks blocks of kThreads; each thread sums a grid-stride slice, the block
// tree-reduces to one partial. Pass 2: one block of kSumBlocks threads tree-reduces the
// partials and writes scale * total in the output dtype.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.h"

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::from_acc;
using detail::to_acc;

constexpr int kThreads = 256;

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void sum_partials(int64_t n, const T* __restrict__ x, acc_t<T>* __restrict__ partials) {
  using A = acc_t<T>;
  RT_SHARED(A, smem, [kThreads]);
  A s = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    s += to_acc(x[i]);
  s = detail::block_sum(s, smem);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

template <typename T>
__global__ void sum_final(const acc_t<T>* __restrict__ partials, acc_t<T> scale, T* __restrict__ y) {
  using A = acc_t<T>;
  RT_SHARED(A, smem, [kSumBlocks]);
  const A s = detail::block_sum(partials[threadIdx.x], smem);
  if (threadIdx.x == 0) y[0] = from_acc<T>(s * scale);
}

}  // namespace

// ---- launcher --------------------------------------------------------------------------

void sum(DType t, int64_t n, const void* x, double scale, void* y, void* partials, cudaStream_t s) {
  RT_CHECK(n >= 0, "sum: negative element count ", n);
  RT_CHECK(y != nullptr && partials != nullptr && (n == 0 || x != nullptr), "sum: null pointer");
  static_assert((kSumBlocks & (kSumBlocks - 1)) == 0 && kSumBlocks <= 1024, "block_sum needs a power of two");
  detail::dispatch_floating(t, "sum", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    auto part = static_cast<A*>(partials);
    // n == 0 still runs: every partial is 0 and y[0] = 0.
    RT_LAUNCH(kSumBlocks, kThreads, 0, s, sum_partials<T>)(n, static_cast<const T*>(x), part);
    CUDA_CHECK_LAUNCH();
    RT_LAUNCH(1, kSumBlocks, 0, s, sum_final<T>)(part, A(scale), static_cast<T*>(y));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace rt::cuda
