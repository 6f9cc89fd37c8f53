// softmax and log_softmax on CUDA: the twins of kernels/cpu/softmax.h, same (outer, n, inner)
// view and formulas, f32/f64/bf16/f16 (16-bit types and f32 compute in float, f64 in
// double; the result rounded once). Deterministic (fixed reduction trees). Pointers are
// device pointers; work is queued on `s`. Readable by the host compiler.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

void softmax_forward(DType t, bool log, int64_t outer, int64_t n, int64_t inner, const void* x, void* y,
                     cudaStream_t s);
void softmax_backward(DType t, bool log, int64_t outer, int64_t n, int64_t inner, const void* y, const void* dy,
                      void* dx, cudaStream_t s);

}  // namespace rt::cuda
