#include "kernels/cuda/blas.h"

#include <array>
#include <climits>
#include <cstdio>
#include <memory>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear.h"

namespace rt::cuda {
namespace {

// ---- the handle cache --------------------------------------------------------------------

class BlasHandle {
 public:
  BlasHandle() {
    CUBLAS_CHECK(cublasCreate(&h_));
    // bf16/f16 GEMMs accumulate in f32 all the way (no reduced-precision split-K reductions).
    CUBLAS_CHECK(cublasSetMathMode(h_, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  }
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  ~BlasHandle() {
    const cublasStatus_t st = cublasDestroy(h_);
    if (st != CUBLAS_STATUS_SUCCESS) std::fprintf(stderr, "%s:%d: cublasDestroy failed: %s\n", __FILE__, __LINE__,
                                                  cublasGetStatusName(st));
  }
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

constexpr int kMaxDevices = 64;

}  // namespace

cublasHandle_t blas_handle_for(cudaStream_t s) {
  static std::mutex mu;
  static std::array<std::unique_ptr<BlasHandle>, kMaxDevices> handles;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  RT_CHECK(dev >= 0 && dev < kMaxDevices, "cuBLAS: device ", dev, " is beyond the cuBLAS handle cache (", kMaxDevices,
           " devices)");
  cublasHandle_t h;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!handles[dev]) handles[dev] = std::make_unique<BlasHandle>();
    h = handles[dev]->get();
  }
  CUBLAS_CHECK(cublasSetStream(h, s));
  return h;
}

GemmTypes gemm_types(DType t, const char* op) {
  switch (t) {
    case DType::f32: return {CUDA_R_32F, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, false};
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, true};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, false};
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, false};
    default: RT_FAIL(op, ": the CUDA backend computes in f32, f64, bf16 or f16, got ", dtype_name(t));
  }
}

int blas_int(int64_t v, const char* op, const char* what) {
  RT_CHECK(v >= 0 && v <= INT_MAX, op, ": ", what, " = ", v, " is out of cuBLAS's int range");
  return int(v);
}

void gemm(DType t, const char* op, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
          const void* A, int64_t lda, const void* B, int64_t ldb, void* C, cudaStream_t s, GemmBatch batch) {
  const GemmTypes g = gemm_types(t, op);
  if (batch.count == 0 || m == 0 || n == 0) return;
  if (k == 0) {
    CUDA_CHECK(cudaMemsetAsync(C, 0, size_t(batch.count) * size_t(m) * size_t(n) * dtype_size(t), s));
    return;
  }
  cublasHandle_t h = blas_handle_for(s);
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const void* alpha = g.double_scalars ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = g.double_scalars ? static_cast<const void*>(&zero_d) : &zero_f;
  const int im = blas_int(m, op, "m"), in = blas_int(n, op, "n"), ik = blas_int(k, op, "k");
  const int ilda = blas_int(lda, op, "lda"), ildb = blas_int(ldb, op, "ldb");
  if (batch.count == 1) {
    CUBLAS_CHECK(cublasGemmEx(h, ta, tb, im, in, ik, alpha, A, g.data, ilda, B, g.data, ildb, beta, C, g.data, im,
                              g.compute, CUBLAS_GEMM_DEFAULT));
    return;
  }
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ta, tb, im, in, ik, alpha, A, g.data, ilda, (long long)batch.stride_a, B,
                                          g.data, ildb, (long long)batch.stride_b, beta, C, g.data, im,
                                          (long long)(m * n), blas_int(batch.count, op, "batch"), g.compute,
                                          CUBLAS_GEMM_DEFAULT));
}

}  // namespace rt::cuda
