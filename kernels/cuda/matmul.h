// Batched matrix products on CUDA through cuBLAS (one strided-batched GEMM): the twin of
// kernels/cpu/matmul.h, same arguments and layout (row-major dense matrices, a batch's
// matrices one after another). f32 and f64 compute in their own type; bf16 and f16 are
// multiplied with f32 accumulation. f32 uses TF32 tensor cores only when
// cuda::set_allow_tf32(true) was called (kernels/cuda/linear.h; default off). Pointers are
// device pointers on the current device; work is queued on `s`. Readable by the host compiler.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

// c[i] (M x N) = op(a[i]) op(b[i]) for i < batch; op(a) is M x K (a[i] stored K x M with
// ta), op(b) is K x N (b[i] stored N x K with tb).
void matmul(DType t, int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* a, const void* b,
            void* c, cudaStream_t s);

}  // namespace rt::cuda
