#include <algorithm>

#include "dist/reduce_kernel.h"
#include "engine/error.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel.h"

namespace rt::dist {

namespace {

template <typename T>
void max_into(int64_t n, const T* in, T* inout) {
  cpu::parallel_range(n, [=](int64_t b, int64_t e) {
    const T* x = in + b;
    T* y = inout + b;
    for (int64_t i = 0; i < e - b; ++i) y[i] = x[i] != x[i] ? x[i] : std::max(y[i], x[i]);  // NaN wins
  });
}

template <typename T>
void reduce_typed(ReduceOp op, int64_t n, const void* in_, void* inout_) {
  const T* in = static_cast<const T*>(in_);
  T* inout = static_cast<T*>(inout_);
  switch (op) {
    case ReduceOp::sum: cpu::binary(cpu::Binary::add, n, inout, in, inout); return;
    case ReduceOp::max: max_into(n, in, inout); return;
    case ReduceOp::avg: break;
  }
  RT_FAIL("reduce_cpu: ", reduce_op_name(op), " is not a local reduction (an average is a sum, then scale_cpu)");
}

}  // namespace

void reduce_cpu(ReduceOp op, DType t, int64_t n, const void* in, void* inout) {
  if (t == DType::f32) return reduce_typed<float>(op, n, in, inout);
  if (t == DType::f64) return reduce_typed<double>(op, n, in, inout);
  RT_FAIL("reduce_cpu: the CPU reduces f32 and f64, not ", dtype_name(t), ": convert with .to(DType::f32)");
}

void scale_cpu(DType t, int64_t n, void* x, double s) {
  if (t == DType::f32) return cpu::affine(n, static_cast<float*>(x), s, 0.0, static_cast<float*>(x));
  if (t == DType::f64) return cpu::affine(n, static_cast<double*>(x), s, 0.0, static_cast<double*>(x));
  RT_FAIL("scale_cpu: the CPU scales f32 and f64, not ", dtype_name(t));
}

}  // namespace rt::dist
