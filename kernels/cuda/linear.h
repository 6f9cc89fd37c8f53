// linear on CUDA through cuBLAS: y (N x out) = x (N x in) W^T + b, PyTorch's weight layout
// (out, in), row-major contiguous buffers. The CUDA twin of kernels/cpu/linear.h.
// f32 and f64 compute in their own type; bf16 and f16 are stored in 16 bits and multiplied
// with f32 accumulation (cublasGemmEx, compute type 32F). f32 GEMMs use TF32 tensor cores
// only when set_allow_tf32(true) was called (default off, like
// torch.backends.cuda.matmul.allow_tf32). Readable by the host compiler.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

// Process-wide switch for TF32 in f32 GEMMs (default false).
void set_allow_tf32(bool allow);
bool allow_tf32();

// y = x W^T (+ b when b is not null). Pointers are device pointers on the current device.
void linear_forward(DType t, int64_t N, int64_t in, int64_t out, const void* x, const void* w, const void* b, void* y,
                    cudaStream_t s);
// dx = dy W; dw = dy^T x; db = column sums of dy (deterministic). Each output may be null;
// x is needed only for dw, w only for dx.
void linear_backward(DType t, int64_t N, int64_t in, int64_t out, const void* x, const void* w, const void* dy,
                     void* dx, void* dw, void* db, cudaStream_t s);

}  // namespace rt::cuda
