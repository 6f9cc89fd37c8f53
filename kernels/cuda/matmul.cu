// matmul: one cuBLAS call (blas.h's gemm: a strided batch, or one GEMM for batch 1).
//
// Row-major through column-major cuBLAS (as Note [Row-major through column-major cuBLAS] in
// linear.cu): a row-major r x c buffer is the column-major c x r matrix (its transpose),
// leading dimension c. So c = op(a) op(b) is computed as c^T (N x M) = op(b)^T op(a)^T:
// cuBLAS's first operand is b (transposed iff tb, leading dim = b's stored row length), its
// second is a (transposed iff ta), m = N, n = M, ldc = N.
//
// cuBLAS's handle (one per device, bound to the stream before every call), types and checks
// are shared with linear (blas.h).
#include <cublas_v2.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/matmul.h"

namespace rt::cuda {

void matmul(DType t, int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* a, const void* b,
            void* c, cudaStream_t s) {
  RT_CHECK(batch >= 0 && M >= 0 && N >= 0 && K >= 0, "matmul: negative size (batch ", batch, ", M ", M, ", N ", N,
           ", K ", K, ")");
  gemm_types(t, "matmul");  // rejects other dtypes even when there is nothing to do
  if (batch == 0 || M == 0 || N == 0) return;
  RT_CHECK(c != nullptr && (K == 0 || (a != nullptr && b != nullptr)), "matmul: null pointer");
  // c^T (N x M) = op(b)^T (N x K) op(a)^T (K x M), column-major.
  gemm(t, "matmul", tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, b, tb ? K : N, a,
       ta ? M : K, c, s, GemmBatch{batch, K * N, M * K});
}

}  // namespace rt::cuda
