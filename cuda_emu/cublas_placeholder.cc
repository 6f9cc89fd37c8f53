// TEMPORARY placeholder so that binaries link under --config=cuda-emu while the cuBLAS fake
// is written: every call fails with CUBLAS_STATUS_NOT_SUPPORTED. To be deleted by the fake.
#include <cublas_v2.h>

cublasStatus_t cublasCreate_v2(cublasHandle_t*) { return CUBLAS_STATUS_NOT_SUPPORTED; }
cublasStatus_t cublasDestroy_v2(cublasHandle_t) { return CUBLAS_STATUS_NOT_SUPPORTED; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_NOT_SUPPORTED; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_NOT_SUPPORTED; }
const char* cublasGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_NOT_SUPPORTED"; }
const char* cublasGetStatusString(cublasStatus_t) { return "the cuBLAS fake is not written yet (placeholder)"; }
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                            cudaDataType, int, const void*, cudaDataType, int, const void*, void*, cudaDataType, int,
                            cublasComputeType_t, cublasGemmAlgo_t) {
  return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                          const void*, cudaDataType, int, long long, const void*, cudaDataType, int,
                                          long long, const void*, void*, cudaDataType, int, long long, int,
                                          cublasComputeType_t, cublasGemmAlgo_t) {
  return CUBLAS_STATUS_NOT_SUPPORTED;
}
