// cast: grid-stride conversion kernel, one instantiation per (from, to) pair.
// Floating pairs convert through the wider of the two compute types (double when either
// side is f64, so f64 <-> f32 rounds once, and f64 -> bf16/f16 rounds via float: see the
// note at to_storage).
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/common.cuh"

namespace rt::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

__device__ __forceinline__ double widen(float v) { return v; }
__device__ __forceinline__ double widen(double v) { return v; }
__device__ __forceinline__ double widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ double widen(__half v) { return __half2float(v); }
__device__ __forceinline__ double widen(uint8_t v) { return double(v); }

// Note: double -> bf16/f16 goes through float (double rounding); the host conversion in
// base/dtype.h does the same (f32_to_bf16 takes a float), so both backends agree.
template <typename T> __device__ __forceinline__ T to_storage(double v) { return T(v); }
template <> __device__ __forceinline__ __nv_bfloat16 to_storage<__nv_bfloat16>(double v) { return __float2bfloat16(float(v)); }
template <> __device__ __forceinline__ __half to_storage<__half>(double v) { return __float2half(float(v)); }

template <typename S, typename D>
__global__ void cast_kernel(int64_t n, const S* __restrict__ src, D* __restrict__ dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = to_storage<D>(widen(src[i]));
}

// ---- launchers -------------------------------------------------------------------------

constexpr int kThreads = 256;

template <typename S, typename D>
void launch_cast(int64_t n, const void* src, void* dst, cudaStream_t s) {
  RT_LAUNCH(detail::grid_for(n, kThreads), kThreads, 0, s, cast_kernel<S, D>)(n, static_cast<const S*>(src),
                                                                        static_cast<D*>(dst));
  CUDA_CHECK_LAUNCH();
}

template <typename S>
void cast_from(DType to, int64_t n, const void* src, void* dst, cudaStream_t s) {
  detail::dispatch_floating(to, "cast", [&](auto z) { launch_cast<S, decltype(z)>(n, src, dst, s); });
}

}  // namespace

bool cast_supported(DType from, DType to) {
  return is_floating(to) && (is_floating(from) || (from == DType::u8 && to == DType::f32));
}

void cast(DType from, DType to, int64_t n, const void* src, void* dst, cudaStream_t s) {
  RT_CHECK(cast_supported(from, to), "cast: ", dtype_name(from), " -> ", dtype_name(to),
           " has no CUDA kernel (floating pairs and u8 -> f32 only)");
  RT_CHECK(n >= 0, "cast: negative element count ", n);
  RT_CHECK(n == 0 || (src != nullptr && dst != nullptr), "cast: null pointer");
  if (n == 0) return;
  if (from == DType::u8) return launch_cast<uint8_t, float>(n, src, dst, s);
  detail::dispatch_floating(from, "cast", [&](auto z) { cast_from<decltype(z)>(to, n, src, dst, s); });
}

}  // namespace rt::cuda
