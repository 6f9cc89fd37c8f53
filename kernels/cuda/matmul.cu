// matmul: one cublasGemmStridedBatchedEx per call (batch 1 included).
//
// Row-major through column-major cuBLAS (as Note [Row-major through column-major cuBLAS] in
// linear.cu): a row-major r x c buffer is the column-major c x r matrix (its transpose),
// leading dimension c. So c = op(a) op(b) is computed as c^T (N x M) = op(b)^T op(a)^T:
// cuBLAS's first operand is b (transposed iff tb, leading dim = b's stored row length), its
// second is a (transposed iff ta), m = N, n = M, ldc = N.
//
// The handle: one per device, created on first use and kept for the process, bound to the
// stream before every call (Note [cuBLAS handle cache] in linear.cu; that cache is private
// to linear.cu, so matmul keeps its own).
#include <cublas_v2.h>

#include <array>
#include <climits>
#include <cstdio>
#include <memory>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/blas.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/matmul.cuh"

namespace rt::cuda {
namespace {


// ---- launcher helpers ----------------------------------------------------------------------

int as_int(int64_t v, const char* what) {
  RT_CHECK(v >= 0 && v <= INT_MAX, "matmul: ", what, " = ", v, " is out of cuBLAS's int range");
  return int(v);
}

struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  bool double_scalars;
};

GemmTypes gemm_types(DType t) {
  switch (t) {
    case DType::f32: return {CUDA_R_32F, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, false};
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, true};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, false};
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, false};
    default: RT_FAIL("matmul: the CUDA backend computes in f32, f64, bf16 or f16, got ", dtype_name(t));
  }
}

}  // namespace

void matmul(DType t, int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* a, const void* b,
            void* c, cudaStream_t s) {
  RT_CHECK(batch >= 0 && M >= 0 && N >= 0 && K >= 0, "matmul: negative size (batch ", batch, ", M ", M, ", N ", N,
           ", K ", K, ")");
  const GemmTypes g = gemm_types(t);  // rejects other dtypes even when there is nothing to do
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
      h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(N, "N"), as_int(M, "M"),
      as_int(K, "K"), alpha, b, g.data, as_int(tb ? K : N, "ldb"), (long long)(K * N), a, g.data,
      as_int(ta ? M : K, "lda"), (long long)(M * K), beta, c, g.data, as_int(N, "ldc"), (long long)(M * N),
      as_int(batch, "batch"), g.compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace rt::cuda
