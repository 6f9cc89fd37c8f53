// cast: grid-stride conversion kernel, one instantiation per (from, to) pair.
// Floating pairs convert through the wider of the two compute types (double when either
// side is f64, so f64 <-> f32 rounds once, and f64 -> bf16/f16 rounds via float: see the
// note at to_storage).
#include "kernels/cuda/cast.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/multi_tensor_apply.cuh"

#include <type_traits>

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

// Operands: ptr[0] src, ptr[1] dst; scalar set 0 assigns, 1 accumulates.
template <typename S, typename D>
struct CastOp {
  int accumulate[kMtaMaxGroups];
  __device__ void operator()(const MtaRow& r, int64_t, int64_t begin, int64_t end) const {
    const S* src = static_cast<const S*>(r.ptr[0]);
    D* dst = static_cast<D*>(r.ptr[1]);
    if (accumulate[r.group]) {
      // src converted to D first (as src.to(D) is), then the add in D's compute type.
      RT_MTA_FOR(i, begin, end) {
        const D v = to_storage<D>(widen(src[i]));
        dst[i] = detail::from_acc<D>(detail::to_acc(dst[i]) + detail::to_acc(v));
      }
    } else {
      RT_MTA_FOR(i, begin, end) dst[i] = to_storage<D>(widen(src[i]));
    }
  }
};

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

void cast_many(DType from, DType to, const std::vector<CastTensor>& list, MultiTensorTable& table, cudaStream_t s) {
  RT_CHECK(is_floating(from) && is_floating(to), "cast_many: ", dtype_name(from), " -> ", dtype_name(to),
           " has no CUDA kernel (floating pairs only)");
  // Its one caller, ComputeCopies, refuses masters in the compute dtype; a same-dtype list is
  // a copy (or an add), so no kernel is compiled for it.
  RT_CHECK(from != to, "cast_many: ", dtype_name(from), " -> ", dtype_name(to),
           " has no CUDA kernel (the dtypes must differ; copy or add instead)");
  std::vector<MtaRow> rows(list.size(), MtaRow{});
  std::vector<int> sets(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const CastTensor& e = list[i];
    RT_CHECK(e.n >= 0, "cast_many: negative element count ", e.n);
    RT_CHECK(e.n == 0 || (e.src != nullptr && e.dst != nullptr), "cast_many: null pointer");
    rows[i].ptr[0] = const_cast<void*>(e.src);
    rows[i].ptr[1] = e.dst;
    rows[i].n = e.n;
    sets[i] = e.accumulate ? 1 : 0;
  }
  table.set(std::move(rows), sets, s);
  detail::dispatch_floating(from, "cast_many", [&](auto zs) {
    detail::dispatch_floating(to, "cast_many", [&](auto zd) {
      using S = decltype(zs);
      using D = decltype(zd);
      // One conversion per element, and an add when accumulating.
      if constexpr (!std::is_same_v<S, D>)
        multi_tensor_apply(table, CastOp<S, D>{}, [](CastOp<S, D>& op, const std::vector<int>& groups) {
          for (size_t k = 0; k < groups.size(); ++k) op.accumulate[k] = groups[k];
        }, 1.0, from == DType::f64 || to == DType::f64, s);
    });
  });
}

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
