// Elementwise ops and full reductions on CUDA over a floating dtype (f32, f64, bf16, f16;
// 16-bit types compute in float and round once). The ops and their math come from the one
// table in kernels/elementwise_ops.h (Note [Elementwise op table]), shared with the CPU
// backend (kernels/cpu/elementwise.h: same launchers, same argument order). Pointers are
// device pointers, work is queued on `stream` (nothing waits for it). Readable by the host
// compiler.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"
#include "kernels/elementwise_ops.h"

namespace rt::cuda {

using Binary = ew::Binary;
using Unary = ew::Unary;

// y = op(a, b) over n elements (y may be a).
void binary(Binary op, DType t, int64_t n, const void* a, const void* b, void* y, cudaStream_t s);
// y (dense, p.numel() elements) = op(a, b) read through the plan's
// strides (Note [Broadcast plan]).
void binary_broadcast(Binary op, DType t, const ew::BroadcastPlan& p, const void* a, const void* b, void* y,
                      cudaStream_t s);
// The table's da and/or db (null: not wanted) over the plan, one kernel: da, db, y and dy
// dense in the output's order, a and b read through the plan. Inputs the wanted formulas do
// not use may be null.
void binary_backward(Binary op, DType t, const ew::BroadcastPlan& p, const void* a, const void* b, const void* y,
                     const void* dy, void* da, void* db, cudaStream_t s);
// r (operand `operand`'s shape, dense in its format) = g (dense along p) summed over the
// dims that operand broadcasts, accumulated in double in a fixed order.
void sum_to(DType t, const ew::BroadcastPlan& p, int operand, const void* g, void* r, cudaStream_t s);
// y = a * s + t (y may be a)
void affine(DType t, int64_t n, const void* a, double s, double sh, void* y, cudaStream_t st);
// y = max(a, b) over n elements (y may be a); NaN in either operand gives NaN, like
// torch.maximum (the all-reduce's max: distributed/reduce_kernel_cuda.cc). Not in the op
// table: no engine op takes it, so it has no backward.
void maximum(DType t, int64_t n, const void* a, const void* b, void* y, cudaStream_t s);
// y = op(x, p) (p: the op's scalar, pow's power; ignored by the others).
void unary(Unary op, DType t, int64_t n, const void* x, void* y, double p, cudaStream_t s);
// dx = the table's backward; x or y may be null where the op's formula does not read it.
void unary_backward(Unary op, DType t, int64_t n, const void* x, const void* y, const void* dy, void* dx, double p,
                    cudaStream_t s);
// dx = dy where y > 0, else 0.
void relu_backward(DType t, int64_t n, const void* y, const void* dy, void* dx, cudaStream_t s);
// dx = dy / (2 y), the gradient of y = sqrt(x).
void sqrt_backward(DType t, int64_t n, const void* y, const void* dy, void* dx, cudaStream_t s);
// a += alpha * b
void axpy(DType t, int64_t n, double alpha, const void* b, void* a, cudaStream_t s);
// y[0:n] = scalar[0] * scale: broadcasts a device scalar (a reduction's gradient) without
// reading it on the host.
void fill_from_scalar(DType t, int64_t n, const void* scalar, double scale, void* y, cudaStream_t s);

// For tests: while one lives, binary_broadcast and binary_backward index with 64 bits at
// every size, as they do only past 2^31 elements otherwise (more than a test can hold), so
// that their 64-bit instantiations run (Note [Kernel coverage] in cuda_emu/coverage.cc).
class WideIndexForTests {
 public:
  WideIndexForTests();
  ~WideIndexForTests();
  WideIndexForTests(const WideIndexForTests&) = delete;
  WideIndexForTests& operator=(const WideIndexForTests&) = delete;
};

}  // namespace rt::cuda
