#include <algorithm>

#include "distributed/reduce_kernel.h"
#include "base/error.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel.h"

namespace rt::dist {

namespace {

// Note [One thread for the local reduce]
// The reductions run on a communication thread beside the transport's own threads and the
// peers' processes. An OpenMP team there (the elementwise kernels fork one above
// kParallelGrain elements) spins on the very cores the network needs: on 2 cores it made
// Gloo's all-reduce 4x slower. So the kernels get pieces below the grain, which they run on
// the calling thread; one core reduces far faster than a socket delivers.
constexpr int64_t kPiece = cpu::kParallelGrain - 1;

template <typename T>
void max_into(int64_t n, const T* x, T* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] != x[i] ? x[i] : std::max(y[i], x[i]);  // NaN wins
}

template <typename T>
void reduce_typed(ReduceOp op, int64_t n, const void* in_, void* inout_) {
  const T* in = static_cast<const T*>(in_);
  T* inout = static_cast<T*>(inout_);
  RT_CHECK(op != ReduceOp::avg, "reduce_cpu: avg is not a local reduction (an average is a sum, then scale_cpu)");
  for (int64_t b = 0; b < n; b += kPiece) {
    const int64_t m = std::min(kPiece, n - b);
    if (op == ReduceOp::sum) cpu::binary(cpu::Binary::add, m, inout + b, in + b, inout + b);
    else max_into(m, in + b, inout + b);
  }
}

template <typename T>
void scale_typed(int64_t n, void* x_, double s) {
  T* x = static_cast<T*>(x_);
  for (int64_t b = 0; b < n; b += kPiece) cpu::affine(std::min(kPiece, n - b), x + b, s, 0.0, x + b);
}

}  // namespace

void reduce_cpu(ReduceOp op, DType t, int64_t n, const void* in, void* inout) {
  if (t == DType::f32) return reduce_typed<float>(op, n, in, inout);
  if (t == DType::f64) return reduce_typed<double>(op, n, in, inout);
  RT_FAIL("reduce_cpu: the CPU reduces f32 and f64, not ", dtype_name(t), ": convert with .to(DType::f32)");
}

void scale_cpu(DType t, int64_t n, void* x, double s) {
  if (t == DType::f32) return scale_typed<float>(n, x, s);
  if (t == DType::f64) return scale_typed<double>(n, x, s);
  RT_FAIL("scale_cpu: the CPU scales f32 and f64, not ", dtype_name(t));
}

}  // namespace rt::dist
