// What the cuBLAS fake's files share (cuda_emu/cublas_*.cc): the handle behind
// cublasHandle_t, the registry of live handles, and how a refusal says why.
#pragma once

#include <cublas_v2.h>

#include <atomic>
#include <string>

// cublas_api.h declares the struct and leaves it to the library: this is ours. A handle
// belongs to the device current at cublasCreate (as in cuBLAS, one handle per device).
struct cublasContext {
  int device = 0;
  // Set by cublasSetStream/cublasSetMathMode and read by GEMM calls, possibly on other
  // threads (the engine shares one handle per device), hence atomics.
  std::atomic<cudaStream_t> stream{nullptr};  // nullptr: the device's legacy default stream
  std::atomic<int> math_mode{CUBLAS_DEFAULT_MATH};
};

namespace rt::emu::blas {

// The handle if cublasCreate made it and cublasDestroy has not ended it, else nullptr.
cublasContext* live(cublasHandle_t h);

// Note [Why a status]
// cuBLAS answers a bad call with a bare status. The fake also says why: the reason goes to
// stderr at once, and cublasGetStatusString of that status on the same thread appends it,
// so an engine error built from the status string (CUBLAS_CHECK) names the problem too.
// Returns `st`.
cublasStatus_t refuse(cublasStatus_t st, const std::string& why);
// The calling thread's last reason given with `st`, or "" (cublasGetStatusString).
const std::string& last_reason(cublasStatus_t st);

}  // namespace rt::emu::blas
