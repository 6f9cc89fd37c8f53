// softmax over a middle dim, three passes over each row (max, sum of exp, write; backward:
// sum, write) in one of three kernels chosen from the shape alone:
//   inner == 1, n <= kWarpRow: a warp per row, xor-shuffle trees (every lane gets the result);
//   inner == 1, longer rows:   a block per row, shared-memory trees;
//   inner > 1:                 a thread per (o, i) column walking r; reads along i coalesce.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/softmax.h"

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::dev_exp;
using detail::dev_log;
using detail::from_acc;
using detail::to_acc;

constexpr int kThreads = 256;
constexpr int64_t kWarpRow = 1024;


// The larger of a and b, NaN if either is (like the CPU's loop).
template <typename A>
__device__ __forceinline__ A nan_max(A a, A b) {
  return (b > a || b != b) ? b : a;
}

// Warp-wide all-reduce: every lane gets the same bits (a + b == b + a in IEEE arithmetic).
template <typename A>
__device__ __forceinline__ A warp_max(A v) {
  for (int off = 16; off > 0; off >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Block-wide all-reduce over kThreads threads through smem (kThreads values).
template <typename A>
__device__ A block_max(A v, A* smem) {
  const int t = threadIdx.x;
  smem[t] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (t < s) smem[t] = nan_max(smem[t], smem[t + s]);
    __syncthreads();
  }
  const A r = smem[0];
  __syncthreads();
  return r;
}

// The per-element maps, in the compute type A.
template <bool kLog, typename A>
__device__ __forceinline__ A forward_value(A x, A m, A s_or_log_s) {
  return kLog ? (x - m) - s_or_log_s : dev_exp(x - m) / s_or_log_s;
}
template <bool kLog, typename A>
__device__ __forceinline__ A backward_term(A y, A dy) {
  return kLog ? dy : dy * y;
}
template <bool kLog, typename A>
__device__ __forceinline__ A backward_value(A y, A dy, A s) {
  return kLog ? dy - dev_exp(y) * s : y * (dy - s);
}

// ---- kernels ---------------------------------------------------------------------------

template <bool kLog, typename T>
__global__ void forward_rows_warp(int64_t outer, int64_t n, const T* __restrict__ x, T* __restrict__ y) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t row = warp; row < outer; row += warps) {
    const T* p = x + row * n;
    T* q = y + row * n;
    A m = -INFINITY;
    for (int64_t r = lane; r < n; r += 32) m = nan_max(m, to_acc(p[r]));
    m = warp_max(m);
    A s = 0;
    for (int64_t r = lane; r < n; r += 32) s += dev_exp(to_acc(p[r]) - m);
    s = warp_sum(s);
    if (kLog) s = dev_log(s);
    for (int64_t r = lane; r < n; r += 32) q[r] = from_acc<T>(forward_value<kLog>(to_acc(p[r]), m, s));
  }
}

template <bool kLog, typename T>
__global__ void forward_rows_block(int64_t outer, int64_t n, const T* __restrict__ x, T* __restrict__ y) {
  using A = acc_t<T>;
  RT_SHARED(A, smem, [kThreads]);
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const T* p = x + row * n;
    T* q = y + row * n;
    A m = -INFINITY;
    for (int64_t r = threadIdx.x; r < n; r += kThreads) m = nan_max(m, to_acc(p[r]));
    m = block_max(m, smem);
    A s = 0;
    for (int64_t r = threadIdx.x; r < n; r += kThreads) s += dev_exp(to_acc(p[r]) - m);
    s = detail::block_sum(s, smem);
    if (kLog) s = dev_log(s);
    for (int64_t r = threadIdx.x; r < n; r += kThreads) q[r] = from_acc<T>(forward_value<kLog>(to_acc(p[r]), m, s));
  }
}

template <bool kLog, typename T>
__global__ void forward_cols(int64_t outer, int64_t n, int64_t inner, const T* __restrict__ x, T* __restrict__ y) {
  using A = acc_t<T>;
  const int64_t total = outer * inner;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = k / inner, i = k % inner;
    const T* p = x + o * n * inner + i;
    T* q = y + o * n * inner + i;
    A m = -INFINITY;
    for (int64_t r = 0; r < n; ++r) m = nan_max(m, to_acc(p[r * inner]));
    A s = 0;
    for (int64_t r = 0; r < n; ++r) s += dev_exp(to_acc(p[r * inner]) - m);
    if (kLog) s = dev_log(s);
    for (int64_t r = 0; r < n; ++r) q[r * inner] = from_acc<T>(forward_value<kLog>(to_acc(p[r * inner]), m, s));
  }
}

template <bool kLog, typename T>
__global__ void backward_rows_warp(int64_t outer, int64_t n, const T* __restrict__ y, const T* __restrict__ dy,
                                   T* __restrict__ dx) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t row = warp; row < outer; row += warps) {
    const int64_t b = row * n;
    A s = 0;
    for (int64_t r = lane; r < n; r += 32) s += backward_term<kLog>(to_acc(y[b + r]), to_acc(dy[b + r]));
    s = warp_sum(s);
    for (int64_t r = lane; r < n; r += 32)
      dx[b + r] = from_acc<T>(backward_value<kLog>(to_acc(y[b + r]), to_acc(dy[b + r]), s));
  }
}

template <bool kLog, typename T>
__global__ void backward_rows_block(int64_t outer, int64_t n, const T* __restrict__ y, const T* __restrict__ dy,
                                    T* __restrict__ dx) {
  using A = acc_t<T>;
  RT_SHARED(A, smem, [kThreads]);
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const int64_t b = row * n;
    A s = 0;
    for (int64_t r = threadIdx.x; r < n; r += kThreads) s += backward_term<kLog>(to_acc(y[b + r]), to_acc(dy[b + r]));
    s = detail::block_sum(s, smem);
    for (int64_t r = threadIdx.x; r < n; r += kThreads)
      dx[b + r] = from_acc<T>(backward_value<kLog>(to_acc(y[b + r]), to_acc(dy[b + r]), s));
  }
}

template <bool kLog, typename T>
__global__ void backward_cols(int64_t outer, int64_t n, int64_t inner, const T* __restrict__ y,
                              const T* __restrict__ dy, T* __restrict__ dx) {
  using A = acc_t<T>;
  const int64_t total = outer * inner;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = k / inner, i = k % inner, b = o * n * inner + i;
    A s = 0;
    for (int64_t r = 0; r < n; ++r) s += backward_term<kLog>(to_acc(y[b + r * inner]), to_acc(dy[b + r * inner]));
    for (int64_t r = 0; r < n; ++r) {
      const int64_t at = b + r * inner;
      dx[at] = from_acc<T>(backward_value<kLog>(to_acc(y[at]), to_acc(dy[at]), s));
    }
  }
}

// ---- launchers -------------------------------------------------------------------------

int grid_cap(int64_t blocks) { return int(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535))); }

template <bool kLog, typename T>
void launch_forward(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, cudaStream_t s) {
  if (inner > 1) {
    RT_LAUNCH(detail::grid_for(outer * inner, kThreads), kThreads, 0, s, forward_cols<kLog>)(outer, n, inner, x, y);
  } else if (n <= kWarpRow) {
    RT_LAUNCH(detail::grid_for(outer * 32, kThreads), kThreads, 0, s, forward_rows_warp<kLog>)(outer, n, x, y);
  } else {
    RT_LAUNCH(grid_cap(outer), kThreads, 0, s, forward_rows_block<kLog>)(outer, n, x, y);
  }
  CUDA_CHECK_LAUNCH();
}

template <bool kLog, typename T>
void launch_backward(int64_t outer, int64_t n, int64_t inner, const T* y, const T* dy, T* dx, cudaStream_t s) {
  if (inner > 1) {
    RT_LAUNCH(detail::grid_for(outer * inner, kThreads), kThreads, 0, s, backward_cols<kLog>)(outer, n, inner, y, dy, dx);
  } else if (n <= kWarpRow) {
    RT_LAUNCH(detail::grid_for(outer * 32, kThreads), kThreads, 0, s, backward_rows_warp<kLog>)(outer, n, y, dy, dx);
  } else {
    RT_LAUNCH(grid_cap(outer), kThreads, 0, s, backward_rows_block<kLog>)(outer, n, y, dy, dx);
  }
  CUDA_CHECK_LAUNCH();
}

void check_extents(const char* op, int64_t outer, int64_t n, int64_t inner) {
  RT_CHECK(outer >= 0 && n >= 0 && inner >= 0, op, ": negative extent (", outer, ", ", n, ", ", inner, ")");
}

}  // namespace

void softmax_forward(DType t, bool log, int64_t outer, int64_t n, int64_t inner, const void* x, void* y,
                     cudaStream_t s) {
  check_extents("softmax_forward", outer, n, inner);
  detail::dispatch_floating(t, "softmax_forward", [&](auto z) {
    using T = decltype(z);
    if (outer * n * inner == 0) return;
    RT_CHECK(x != nullptr && y != nullptr, "softmax_forward: null pointer");
    const auto xp = static_cast<const T*>(x);
    const auto yp = static_cast<T*>(y);
    if (log) launch_forward<true>(outer, n, inner, xp, yp, s);
    else launch_forward<false>(outer, n, inner, xp, yp, s);
  });
}

void softmax_backward(DType t, bool log, int64_t outer, int64_t n, int64_t inner, const void* y, const void* dy,
                      void* dx, cudaStream_t s) {
  check_extents("softmax_backward", outer, n, inner);
  detail::dispatch_floating(t, "softmax_backward", [&](auto z) {
    using T = decltype(z);
    if (outer * n * inner == 0) return;
    RT_CHECK(y != nullptr && dy != nullptr && dx != nullptr, "softmax_backward: null pointer");
    const auto yp = static_cast<const T*>(y);
    const auto dyp = static_cast<const T*>(dy);
    const auto dxp = static_cast<T*>(dx);
    if (log) launch_backward<true>(outer, n, inner, yp, dyp, dxp, s);
    else launch_backward<false>(outer, n, inner, yp, dyp, dxp, s);
  });
}

}  // namespace rt::cuda
