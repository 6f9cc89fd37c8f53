// Reductions over a middle dim, one reducer (sum, or max with its first index) through
// kernels chosen from the shape alone (n == 1, a scaled copy, takes a thread per output):
//   inner == 1, short rows: a warp per row, lanes striding the row, a shuffle tree;
//   inner == 1, long rows (n >= kLongRow) and few of them: a block per row, a shared tree;
//   inner > 1: a block per (o, 32 consecutive i): 32 columns x L lanes along r, then the L
//   partials of each column combined in lane order. Reads along i coalesce.
// Each output's partials are combined in an order fixed by the shape, so results are
// bit-identical from run to run.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce_dims.h"

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::from_acc;
using detail::to_acc;

constexpr int kThreads = 256;
constexpr int64_t kLongRow = 4096;

// ---- reducers ----------------------------------------------------------------------------

template <typename T>
struct SumReducer {
  using S = acc_t<T>;
  __device__ static S init() { return S(0); }
  __device__ static S combine(S a, S b) { return a + b; }
  __device__ static void push(S& s, T v, int64_t) { s += to_acc(v); }
  __device__ static S shfl_down(S s, int off) { return __shfl_down_sync(0xffffffffu, s, off); }
};

template <typename T>
struct MaxState {
  acc_t<T> v;
  long long i;  // the r holding v; -1: empty
};

// The larger value, NaN the largest, ties to the smaller index: the result does not depend
// on the order partials meet in.
template <typename T>
struct MaxReducer {
  using S = MaxState<T>;
  __device__ static S init() { return S{acc_t<T>(0), -1}; }
  __device__ static S combine(S a, S b) {
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an || bn) return an && bn ? (a.i < b.i ? a : b) : (an ? a : b);
    if (a.v != b.v) return a.v > b.v ? a : b;
    return a.i < b.i ? a : b;
  }
  __device__ static void push(S& s, T v, int64_t r) { s = combine(s, S{to_acc(v), (long long)r}); }
  __device__ static S shfl_down(S s, int off) {
    return S{__shfl_down_sync(0xffffffffu, s.v, off), __shfl_down_sync(0xffffffffu, s.i, off)};
  }
};

template <typename T>
struct WriteSum {
  T* y;
  acc_t<T> scale;
  __device__ void operator()(int64_t k, acc_t<T> s) const { y[k] = from_acc<T>(s * scale); }
};

template <typename T>
struct WriteMax {
  T* y;
  int64_t* idx;
  __device__ void operator()(int64_t k, const MaxState<T>& s) const {
    y[k] = from_acc<T>(s.v);  // exact: s.v is an input value widened
    idx[k] = int64_t(s.i);
  }
};

// ---- kernels ---------------------------------------------------------------------------

// inner == 1: a warp per row (blockDim.x a multiple of 32; every lane of a warp walks the same rows).
template <typename R, typename T, typename W>
__global__ void reduce_rows_warp(int64_t outer, int64_t n, const T* __restrict__ x, W write) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t row = warp; row < outer; row += warps) {
    typename R::S s = R::init();
    const T* p = x + row * n;
    for (int64_t r = lane; r < n; r += 32) R::push(s, p[r], r);
    for (int off = 16; off > 0; off >>= 1) s = R::combine(s, R::shfl_down(s, off));
    if (lane == 0) write(row, s);
  }
}

// inner == 1, long rows: a block of kThreads per row.
template <typename R, typename T, typename W>
__global__ void reduce_rows_block(int64_t outer, int64_t n, const T* __restrict__ x, W write) {
  RT_SHARED(typename R::S, smem, [kThreads]);
  const int t = threadIdx.x;
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    typename R::S s = R::init();
    const T* p = x + row * n;
    for (int64_t r = t; r < n; r += kThreads) R::push(s, p[r], r);
    smem[t] = s;
    __syncthreads();
    for (int step = kThreads / 2; step > 0; step >>= 1) {
      if (t < step) smem[t] = R::combine(smem[t], smem[t + step]);
      __syncthreads();
    }
    if (t == 0) write(row, smem[0]);
    __syncthreads();  // smem is refilled for the next row
  }
}

// inner > 1: blockDim (32, L); a block per tile of 32 consecutive i of one o. The launch
// bound keeps the registers within what a 1024-thread block may have.
template <typename R, int L, typename T, typename W>
__global__ void __launch_bounds__(32 * L)
    reduce_cols(int64_t outer, int64_t n, int64_t inner, const T* __restrict__ x, W write) {
  RT_SHARED(typename R::S, smem, [L][33]);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tiles_i = (inner + 31) / 32, tiles = outer * tiles_i;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t o = tile / tiles_i, i = (tile % tiles_i) * 32 + tx;
    typename R::S s = R::init();
    if (i < inner) {
      const T* p = x + o * n * inner + i;
      for (int64_t r = ty; r < n; r += L) R::push(s, p[r * inner], r);
    }
    smem[ty][tx] = s;
    __syncthreads();
    if (ty == 0) {
      typename R::S a = smem[0][tx];
      for (int l = 1; l < L; ++l) a = R::combine(a, smem[l][tx]);
      if (i < inner) write(o * inner + i, a);
    }
    __syncthreads();
  }
}

// n == 1 (a scaled copy: mean's backward, a reduction over size-1 dims): a thread per output.
template <typename R, typename T, typename W>
__global__ void reduce_single(int64_t total, const T* __restrict__ x, W write) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    typename R::S s = R::init();
    R::push(s, x[k], 0);
    write(k, s);
  }
}

template <typename T>
__global__ void scatter_max_grad(int64_t outer, int64_t n, int64_t inner, const T* __restrict__ dy,
                                 const int64_t* __restrict__ idx, T* __restrict__ dx) {
  const int64_t total = outer * inner;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = k / inner, i = k % inner;
    dx[(o * n + idx[k]) * inner + i] = dy[k];
  }
}

// ---- launchers -------------------------------------------------------------------------

int grid_cap(int64_t blocks) { return int(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535))); }

template <typename R, typename T, typename W>
void launch_reduce(int64_t outer, int64_t n, int64_t inner, const T* x, W write, cudaStream_t s) {
  if (n == 1) {
    RT_LAUNCH(detail::grid_for(outer * inner, kThreads), kThreads, 0, s, reduce_single<R>)(outer * inner, x, write);
  } else if (inner == 1) {
    if (n >= kLongRow && outer <= 1024) {
      RT_LAUNCH(grid_cap(outer), kThreads, 0, s, reduce_rows_block<R>)(outer, n, x, write);
    } else {
      RT_LAUNCH(detail::grid_for(outer * 32, kThreads), kThreads, 0, s, reduce_rows_warp<R>)(outer, n, x, write);
    }
  } else {
    const int64_t tiles = outer * ((inner + 31) / 32);
    if (tiles < 1024) {
      RT_LAUNCH(grid_cap(tiles), dim3(32, 32), 0, s, reduce_cols<R, 32>)(outer, n, inner, x, write);
    } else {
      RT_LAUNCH(grid_cap(tiles), dim3(32, 8), 0, s, reduce_cols<R, 8>)(outer, n, inner, x, write);
    }
  }
  CUDA_CHECK_LAUNCH();
}

void check_extents(const char* op, int64_t outer, int64_t n, int64_t inner) {
  RT_CHECK(outer >= 0 && n >= 0 && inner >= 0, op, ": negative extent (", outer, ", ", n, ", ", inner, ")");
}

}  // namespace

void sum_dim(DType t, int64_t outer, int64_t n, int64_t inner, const void* x, double scale, void* y, cudaStream_t s) {
  check_extents("sum_dim", outer, n, inner);
  detail::dispatch_floating(t, "sum_dim", [&](auto z) {
    using T = decltype(z);
    if (outer * inner == 0) return;
    RT_CHECK(y != nullptr && (n == 0 || x != nullptr), "sum_dim: null pointer");
    launch_reduce<SumReducer<T>>(outer, n, inner, static_cast<const T*>(x),
                                 WriteSum<T>{static_cast<T*>(y), acc_t<T>(scale)}, s);
  });
}

void max_dim(DType t, int64_t outer, int64_t n, int64_t inner, const void* x, void* y, int64_t* idx, cudaStream_t s) {
  check_extents("max_dim", outer, n, inner);
  RT_CHECK(n > 0, "max_dim: the reduced extent is 0");
  detail::dispatch_floating(t, "max_dim", [&](auto z) {
    using T = decltype(z);
    if (outer * inner == 0) return;
    RT_CHECK(x != nullptr && y != nullptr && idx != nullptr, "max_dim: null pointer");
    launch_reduce<MaxReducer<T>>(outer, n, inner, static_cast<const T*>(x), WriteMax<T>{static_cast<T*>(y), idx}, s);
  });
}

void max_dim_backward(DType t, int64_t outer, int64_t n, int64_t inner, const void* dy, const int64_t* idx, void* dx,
                      cudaStream_t s) {
  check_extents("max_dim_backward", outer, n, inner);
  detail::dispatch_floating(t, "max_dim_backward", [&](auto z) {
    using T = decltype(z);
    const int64_t total = outer * n * inner;
    if (total == 0) return;
    RT_CHECK(dy != nullptr && idx != nullptr && dx != nullptr, "max_dim_backward: null pointer");
    CUDA_CHECK(cudaMemsetAsync(dx, 0, size_t(total) * sizeof(T), s));  // all-zero bits: +0 in every float type
    RT_LAUNCH(detail::grid_for(outer * inner, kThreads), kThreads, 0, s, scatter_max_grad<T>)(
        outer, n, inner, static_cast<const T*>(dy), idx, static_cast<T*>(dx));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace rt::cuda
