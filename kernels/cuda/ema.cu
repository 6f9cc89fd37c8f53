// torchvision's model EMA over a list of tensors (optim/ema.h), fused: one launch per dtype
// for the whole list (Note [Multi-tensor apply] in kernels/cuda/multi_tensor_plan.h).
//
// Bit-exact with the CPU loop in optim/ema.cc, as the optimizers are with theirs
// (Note [Bit-exact updates on the GPU] in optim.cu): every multiply and add is a
// round-to-nearest intrinsic, which nvcc never contracts into an FMA, in the CPU's order
// (Note [EMA rounding] in optim/ema.h); the scalars come from the host in double and are
// rounded to the compute type once. For i64 tensors the conversions are plain casts:
// int64 -> float rounds to nearest (cvt.rn), float -> int64 truncates (cvt.rzi), as
// static_cast does on the CPU.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ema.h"
#include "kernels/cuda/multi_tensor_apply.cuh"

namespace rt::cuda {
namespace {

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// T: the storage type; C: the compute type (T for f32/f64, float for i64).
// Operands: ptr[0] the average (updated in place), ptr[1] the live tensor.
template <typename T, typename C>
struct EmaOp {
  double decay, one_minus_decay;
  int copy;
  __device__ void operator()(const MtaRow& r, int64_t, int64_t begin, int64_t end) const {
    T* avg = static_cast<T*>(r.ptr[0]);          // (n,)
    const T* p = static_cast<const T*>(r.ptr[1]);  // (n,)
    const C d = C(decay), omd = C(one_minus_decay);
    RT_MTA_FOR(i, begin, end) {
      if (copy) {
        avg[i] = p[i];
        continue;
      }
      const C kept = mul_rn(d, C(avg[i]));   // decay * avg
      const C taken = mul_rn(omd, C(p[i]));  // (1 - decay) * p
      avg[i] = T(add_rn(kept, taken));
    }
  }
};

}  // namespace

void ema_update(DType t, const std::vector<EmaTensor>& list, double decay, bool copy, MultiTensorTable& table,
                cudaStream_t s) {
  RT_CHECK(t == DType::f32 || t == DType::f64 || t == DType::i64, "ema_update: tensors must be f32, f64 or i64, got ",
           dtype_name(t));
  RT_CHECK(std::isfinite(decay), "ema_update: decay must be finite, got ", decay);
  std::vector<MtaRow> rows(list.size(), MtaRow{});
  for (size_t i = 0; i < list.size(); ++i) {
    const EmaTensor& e = list[i];
    RT_CHECK(e.n >= 0, "ema_update: negative element count ", e.n);
    RT_CHECK(e.n == 0 || (e.avg && e.p), "ema_update: null pointer");
    rows[i].ptr[0] = e.avg;
    rows[i].ptr[1] = const_cast<void*>(e.p);
    rows[i].n = e.n;
  }
  table.set(std::move(rows), std::vector<int>(list.size(), 0), s);
  // Python's (1 - decay), in double; two multiplies and an add per element.
  const double omd = 1.0 - decay;
  if (t == DType::f32) multi_tensor_apply(table, EmaOp<float, float>{decay, omd, copy}, NoGroups{}, 3.0, false, s);
  else if (t == DType::f64)
    multi_tensor_apply(table, EmaOp<double, double>{decay, omd, copy}, NoGroups{}, 3.0, true, s);
  else multi_tensor_apply(table, EmaOp<int64_t, float>{decay, omd, copy}, NoGroups{}, 3.0, false, s);
}

}  // namespace rt::cuda
