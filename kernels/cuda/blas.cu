#include "kernels/cuda/blas.cuh"

#include <array>
#include <climits>
#include <cstdio>
#include <memory>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear.cuh"

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

}  // namespace rt::cuda
