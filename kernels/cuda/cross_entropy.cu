// cross_entropy: row softmax + smoothed loss, the deterministic batch mean, and backward.
//
// Kernels first, then launchers. Forward: one block per row (grid-stride over rows) reduces
// the row's max, sum of exp(z - max) and sum of z with block trees (fixed order), writes the
// probabilities and the row's loss; then one block sums the row losses in a fixed order and
// writes the mean. Backward: one thread per logit, reading the loss gradient on the device.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy.h"

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::dev_exp;
using detail::dev_log;
using detail::from_acc;
using detail::to_acc;

constexpr int kThreads = 256;


// Max over the block, NaN ignored like std::max(m, v) on the CPU (a NaN logit still makes
// the row's loss NaN through the sums). Every thread gets it; smem holds blockDim.x values.
template <typename A>
__device__ A block_max(A v, A* smem) {
  const int t = threadIdx.x;
  smem[t] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s && smem[t] < smem[t + s]) smem[t] = smem[t + s];
    __syncthreads();
  }
  const A r = smem[0];
  __syncthreads();
  return r;
}

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void rows_kernel(int64_t N, int64_t K, const T* __restrict__ logits, const int64_t* __restrict__ target,
                            acc_t<T> e, T* __restrict__ probs, acc_t<T>* __restrict__ row_loss, int32_t* bad) {
  using A = acc_t<T>;
  RT_SHARED(A, smem, [kThreads]);
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* z = logits + r * K;
    A mx = A(-INFINITY);
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      const A v = to_acc(z[k]);
      if (mx < v) mx = v;
    }
    mx = block_max(mx, smem);
    A se = 0, sz = 0;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      const A v = to_acc(z[k]);
      se += dev_exp(v - mx);
      sz += v;
    }
    se = detail::block_sum(se, smem);
    sz = detail::block_sum(sz, smem);
    const A lse = mx + dev_log(se);  // log sum exp
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) probs[r * K + k] = from_acc<T>(dev_exp(to_acc(z[k]) - lse));
    if (threadIdx.x == 0) {
      const int64_t y = target[r];
      const bool ok = y >= 0 && y < K;  // Note [CUDA target validation]
      if (!ok && bad != nullptr) *bad = 1;
      const A nll = ok ? lse - to_acc(z[y]) : A(NAN);
      const A smooth = lse - sz / A(K);  // mean_k(-log p_k)
      row_loss[r] = (A(1) - e) * nll + e * smooth;
    }
  }
}

template <typename T>
__global__ void mean_kernel(int64_t N, const acc_t<T>* __restrict__ row_loss, T* __restrict__ loss) {
  using A = acc_t<T>;
  RT_SHARED(A, smem, [kThreads]);
  A s = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += row_loss[i];
  s = detail::block_sum(s, smem);
  if (threadIdx.x == 0) loss[0] = from_acc<T>(s / A(N));
}

template <typename T>
__global__ void backward_kernel(int64_t N, int64_t K, const T* __restrict__ probs, const int64_t* __restrict__ target,
                                acc_t<T> e, const T* __restrict__ g, T* __restrict__ dlogits) {
  using A = acc_t<T>;
  const A scale = to_acc(g[0]) / A(N), off = e / A(K);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N * K; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / K, k = i % K, y = target[r];
    const bool ok = y >= 0 && y < K;  // Note [CUDA target validation]
    const A want = (k == y ? A(1) - e : A(0)) + off;
    dlogits[i] = from_acc<T>(ok ? scale * (to_acc(probs[i]) - want) : A(NAN));
  }
}

// ---- launchers -------------------------------------------------------------------------

void check_args(int64_t N, int64_t K, double smoothing, const char* op) {
  RT_CHECK(N > 0 && K > 0, op, ": empty logits (", N, ", ", K, ")");
  RT_CHECK(smoothing >= 0.0 && smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ", smoothing);
}

}  // namespace

void cross_entropy_forward(DType t, int64_t N, int64_t K, const void* logits, const int64_t* target, double smoothing,
                           void* probs, void* row_loss, void* loss, int32_t* bad_target, cudaStream_t s) {
  const char* op = "cross_entropy_forward";
  check_args(N, K, smoothing, op);
  RT_CHECK(logits != nullptr && target != nullptr && probs != nullptr && row_loss != nullptr && loss != nullptr, op,
           ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const int grid = int(std::min<int64_t>(N, 65535));
    // The kernel lab's FLOPs: max, exp, sum and the smoothed loss terms, about 5 per logit
    // (an exp counted as one).
    rt::cuda::flops_hint(5.0 * double(N) * double(K), std::is_same_v<T, double>);
    RT_LAUNCH(grid, kThreads, 0, s, rows_kernel<T>)(N, K, static_cast<const T*>(logits), target, A(smoothing),
                                             static_cast<T*>(probs), static_cast<A*>(row_loss), bad_target);
    CUDA_CHECK_LAUNCH();
    RT_LAUNCH(1, kThreads, 0, s, mean_kernel<T>)(N, static_cast<const A*>(row_loss), static_cast<T*>(loss));
    CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_backward(DType t, int64_t N, int64_t K, const void* probs, const int64_t* target, double smoothing,
                            const void* g, void* dlogits, cudaStream_t s) {
  const char* op = "cross_entropy_backward";
  check_args(N, K, smoothing, op);
  RT_CHECK(probs != nullptr && target != nullptr && g != nullptr && dlogits != nullptr, op, ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    rt::cuda::flops_hint(3.0 * double(N) * double(K), std::is_same_v<T, double>);  // (p - target) * g
    RT_LAUNCH(detail::grid_for(N * K, kThreads), kThreads, 0, s, backward_kernel<T>)(
        N, K, static_cast<const T*>(probs), target, A(smoothing), static_cast<const T*>(g), static_cast<T*>(dlogits));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace rt::cuda
