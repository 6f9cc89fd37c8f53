// Elementwise ops and full reductions on CUDA over n contiguous elements of a floating dtype
// (f32, f64, bf16, f16; 16-bit types compute in float and round once). The CUDA twins of
// kernels/cpu/elementwise.h, same argument order; pointers are device pointers, work is
// queued on `stream` (nothing waits for it). Readable by the host compiler.
#pragma once

#include <cstdint>

#include "engine/dtype.h"
#include "kernels/cuda/stream.cuh"

namespace rt::cuda {

// Same enumerators, same order as rt::cpu::Binary / rt::cpu::Unary.
enum class Binary { add, sub, mul, add_relu };
enum class Unary { relu, square, sqrt };

void binary(Binary op, DType t, int64_t n, const void* a, const void* b, void* y, cudaStream_t s);
// y = a * s + t (y may be a)
void affine(DType t, int64_t n, const void* a, double s, double sh, void* y, cudaStream_t st);
void unary(Unary op, DType t, int64_t n, const void* x, void* y, cudaStream_t s);
// dx = dy where y > 0, else 0.
void relu_backward(DType t, int64_t n, const void* y, const void* dy, void* dx, cudaStream_t s);
// dx = dy / (2 y), the gradient of y = sqrt(x).
void sqrt_backward(DType t, int64_t n, const void* y, const void* dy, void* dx, cudaStream_t s);
// a += alpha * b
void axpy(DType t, int64_t n, double alpha, const void* b, void* a, cudaStream_t s);
// y[0:n] = scalar[0] * scale: broadcasts a device scalar (a reduction's gradient) without
// reading it on the host.
void fill_from_scalar(DType t, int64_t n, const void* scalar, double scale, void* y, cudaStream_t s);

}  // namespace rt::cuda
