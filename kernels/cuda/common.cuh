// Device helpers shared by the kernel files (CUDA only; the engine never includes this).
//   acc_t<T>: the compute/accumulation type: double for double, float for everything else
//             (bf16 and f16 are storage types: loaded, widened to float, rounded once).
//   Pack<T>:  16 bytes of T, for vectorised loads and stores.
//   block_sum: a deterministic tree reduction over the block (fixed order for a fixed
//              blockDim, so results do not depend on scheduling).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.cuh"

namespace rt::cuda::detail {

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };
template <typename T> using acc_t = typename Acc<T>::type;

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_acc(acc_t<T> v) { return T(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half(v); }

__device__ __forceinline__ float dev_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double dev_sqrt(double v) { return sqrt(v); }
__device__ __forceinline__ float dev_exp(float v) { return expf(v); }
__device__ __forceinline__ double dev_exp(double v) { return exp(v); }
__device__ __forceinline__ float dev_log(float v) { return logf(v); }
__device__ __forceinline__ double dev_log(double v) { return log(v); }

template <typename T>
struct alignas(16) Pack {
  static constexpr int kWidth = 16 / sizeof(T);
  T v[kWidth];
};

inline bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Sum of v over the block (blockDim.x a power of two, at most 1024); every thread gets it.
// `smem` holds blockDim.x values of A.
template <typename A>
__device__ A block_sum(A v, A* smem) {
  const int t = threadIdx.x;
  smem[t] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) smem[t] += smem[t + s];
    __syncthreads();
  }
  const A r = smem[0];
  __syncthreads();  // smem reusable after return
  return r;
}

// Blocks for a grid-stride loop over `work` items.
inline int grid_for(int64_t work, int threads) {
  return int(std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, 65535)));
}

// Calls f(float{}) for f32, f(double{}) for anything else: the kernels that take f32 or f64
// only (optimizer rules, norms), whose launchers check the dtype first.
template <typename F>
void dispatch_f32_f64(DType t, F&& f) {
  if (t == DType::f32) f(float{});
  else f(double{});
}

// Calls f(T{}) with the storage type of a floating dtype.
template <typename F>
void dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::bf16: return f(__nv_bfloat16{});
    case DType::f16: return f(__half{});
    default: RT_FAIL(op, ": the CUDA backend computes in f32, f64, bf16 or f16, got ", dtype_name(t));
  }
}

}  // namespace rt::cuda::detail
