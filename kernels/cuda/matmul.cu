// matmul: one cublasGemmStridedBatchedEx per call (batch 1 included).
//
// Row-major through column-major cuBLAS (as Note [Row-major through column-major cuBLAS] in
// linear.cu): a row-major r x c buffer is the column-major c x r matrix (its transpose),
// leading dimension c. So c = op(a) op(b) is computed as c^T (N x M) = op(b)^T op(a)^T:
// cuBLAS's first operand is b (transposed iff tb, leading dim = b's stored row length), its
// second is a (transposed iff ta), m = N, n = M, ldc = N.
//
// cuBLAS's handle (one per device, bound to the stream before every call), types and checks
// are shared with linear (blas.cuh).
#include <cublas_v2.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/blas.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/matmul.cuh"

namespace rt::cuda {

void matmul(DType t, int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* a, const void* b,
            void* c, cudaStream_t s) {
  RT_CHECK(batch >= 0 && M >= 0 && N >= 0 && K >= 0, "matmul: negative size (batch ", batch, ", M ", M, ", N ", N,
           ", K ", K, ")");
  const GemmTypes g = gemm_types(t, "matmul");  // rejects other dtypes even when there is nothing to do
  if (batch == 0 || M == 0 || N == 0) return;
  RT_CHECK(c != nullptr && (K == 0 || (a != nullptr && b != nullptr)), "matmul: null pointer");
  if (K == 0) {  // an empty sum: c = 0 (cuBLAS's quick return would leave c untouched)
    CUDA_CHECK(cudaMemsetAsync(c, 0, size_t(batch) * size_t(M) * size_t(N) * dtype_size(t), s));
    return;
  }
  cublasHandle_t h = blas_handle_for(s);
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const void* alpha = g.double_scalars ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = g.double_scalars ? static_cast<const void*>(&zero_d) : &zero_f;
  // c^T (N x M) = op(b)^T (N x K) op(a)^T (K x M), column-major.
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, blas_int(N, "matmul", "N"),
      blas_int(M, "matmul", "M"), blas_int(K, "matmul", "K"), alpha, b, g.data, blas_int(tb ? K : N, "matmul", "ldb"),
      (long long)(K * N), a, g.data, blas_int(ta ? M : K, "matmul", "lda"), (long long)(M * K), beta, c, g.data,
      blas_int(N, "matmul", "ldc"), (long long)(M * N), blas_int(batch, "matmul", "batch"), g.compute,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace rt::cuda
