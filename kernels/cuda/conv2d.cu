// conv2d's bias on CUDA (the convolutions themselves: cudnn_conv.cu). Bias is rare in
// ResNets (convolutions feed batch norm), so these are plain, not fast.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv2d.h"

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::from_acc;
using detail::to_acc;

constexpr int kThreads = 256;

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void bias_add_kernel(int64_t total, int64_t C, int64_t S, bool nhwc, T* y, const T* bias) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = nhwc ? i % C : (i / S) % C;
    y[i] = from_acc<T>(to_acc(y[i]) + to_acc(bias[c]));
  }
}

// One block per channel; each thread strides over the channel's N*S values in a fixed
// order, then a fixed tree: deterministic.
template <typename T>
__global__ void bias_grad_kernel(int64_t N, int64_t C, int64_t S, bool nhwc, const T* dy, T* db) {
  using A = acc_t<T>;
  RT_SHARED(A, smem, [kThreads]);
  const int64_t c = blockIdx.x, M = N * S;
  A s = 0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const int64_t n = j / S, r = j - n * S;
    s += to_acc(dy[nhwc ? j * C + c : (n * C + c) * S + r]);
  }
  s = detail::block_sum(s, smem);
  if (threadIdx.x == 0) db[c] = from_acc<T>(s);
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

void conv_bias_add(DType t, int64_t N, int64_t C, int64_t S, bool nhwc, void* y, const void* bias, cudaStream_t s) {
  RT_CHECK(N >= 0 && C >= 0 && S >= 0, "conv_bias_add: negative size");
  const int64_t total = N * C * S;
  if (total == 0) return;
  RT_CHECK(y && bias, "conv_bias_add: null pointer");
  detail::dispatch_floating(t, "conv_bias_add", [&](auto z) {
    using T = decltype(z);
    RT_LAUNCH(detail::grid_for(total, kThreads), kThreads, 0, s, bias_add_kernel<T>)(total, C, S, nhwc, static_cast<T*>(y),
                                                                              static_cast<const T*>(bias));
    CUDA_CHECK_LAUNCH();
  });
}

void conv_bias_grad(DType t, int64_t N, int64_t C, int64_t S, bool nhwc, const void* dy, void* db, cudaStream_t s) {
  RT_CHECK(N >= 0 && C >= 0 && S >= 0, "conv_bias_grad: negative size");
  if (C == 0) return;
  RT_CHECK(dy && db, "conv_bias_grad: null pointer");
  RT_CHECK(C <= 2147483647, "conv_bias_grad: too many channels: ", C);
  detail::dispatch_floating(t, "conv_bias_grad", [&](auto z) {
    using T = decltype(z);
    RT_LAUNCH(unsigned(C), kThreads, 0, s, bias_grad_kernel<T>)(N, C, S, nhwc, static_cast<const T*>(dy), static_cast<T*>(db));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace rt::cuda
