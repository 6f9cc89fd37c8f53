// Reductions over one block of dims on CUDA: the twins of kernels/cpu/reduce_dims.h, same
// (outer, n, inner) view and argument order, f32/f64/bf16/f16 (16-bit types and f32
// accumulate in float, f64 in double). Deterministic: each output's partial results are
// combined in an order fixed by the shape alone (no atomics). Pointers are device pointers;
// work is queued on `s`. Readable by the host compiler.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

// y[o, i] = scale * sum over r of x[o, r, i].
void sum_dim(DType t, int64_t outer, int64_t n, int64_t inner, const void* x, double scale, void* y, cudaStream_t s);
// y[o, i] = max over r of x[o, r, i]; idx = the first r holding it; NaN is the largest value
// (the first NaN wins). n > 0.
void max_dim(DType t, int64_t outer, int64_t n, int64_t inner, const void* x, void* y, int64_t* idx, cudaStream_t s);
// dx (outer, n, inner) = 0 except dx[o, idx[o, i], i] = dy[o, i].
void max_dim_backward(DType t, int64_t outer, int64_t n, int64_t inner, const void* dy, const int64_t* idx, void* dx,
                      cudaStream_t s);

}  // namespace rt::cuda
