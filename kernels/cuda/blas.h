// cuBLAS for the ops that use it (linear, matmul): a checked call with file:line, and one
// handle per device, created once and shared.
#pragma once

#include <cublas_v2.h>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/cuda/stream.h"

#define CUBLAS_CHECK(call)                                                                        \
  do {                                                                                            \
    cublasStatus_t rt_st_ = (call);                                                               \
    if (rt_st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      RT_FAIL(__FILE__, ":", __LINE__, ": ", #call, " failed: ", cublasGetStatusName(rt_st_), " (", \
              cublasGetStatusString(rt_st_), ")");                                                \
  } while (0)

namespace rt::cuda {

// The current device's handle (created on first use, with reduced-precision reductions off),
// bound to stream s.
cublasHandle_t blas_handle_for(cudaStream_t s);

// cuBLAS's data and compute types for a GEMM in t: f32 (TF32 when allow_tf32(), linear.h),
// f64, and bf16/f16 summing in f32. Any other dtype is refused, naming the caller `op`.
struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  bool double_scalars;  // alpha and beta are doubles (f64), else floats
};
GemmTypes gemm_types(DType t, const char* op);

// v as cuBLAS's int; refused, naming `op` and `what`, when it does not fit.
int blas_int(int64_t v, const char* op, const char* what);

// A strided batch of GEMMs: count of them, operand i at A + i * stride_a (and B), result i
// at C + i * m * n elements.
struct GemmBatch {
  int64_t count = 1, stride_a = 0, stride_b = 0;
};

// Column-major C (m x n, leading dimension m) = op(A) op(B) with alpha = 1, beta = 0, in
// dtype t (gemm_types): cublasGemmEx for one, cublasGemmStridedBatchedEx for a batch. An
// empty sum (k == 0) writes zeros (cuBLAS's quick return would leave C untouched). Errors
// name the calling op `op`.
void gemm(DType t, const char* op, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
          const void* A, int64_t lda, const void* B, int64_t ldb, void* C, cudaStream_t s, GemmBatch batch = {});

}  // namespace rt::cuda
