// cuBLAS handles on the emulated device: cublasCreate/Destroy, the handle's stream and math
// mode, and the status names and texts. Same names and signatures as cublas_api.h, whose
// declarations give them C linkage; linked instead of libcublas under --config=cuda-emu.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <mutex>
#include <unordered_set>

#include "cuda_emu/cublas_context.h"

namespace rt::emu::blas {
namespace {

std::mutex g_handles_mu;
std::unordered_set<cublasContext*>& handles() {
  static auto* s = new std::unordered_set<cublasContext*>;  // leaked: used until exit
  return *s;
}

thread_local cublasStatus_t tls_reason_status = CUBLAS_STATUS_SUCCESS;
thread_local std::string tls_reason;

}  // namespace

cublasContext* live(cublasHandle_t h) {
  std::lock_guard<std::mutex> g(g_handles_mu);
  return handles().count(h) ? h : nullptr;
}

cublasStatus_t refuse(cublasStatus_t st, const std::string& why) {
  std::fprintf(stderr, "cuda-emu: cuBLAS: %s\n", why.c_str());
  tls_reason_status = st;
  tls_reason = why;
  return st;
}

const std::string& last_reason(cublasStatus_t st) {
  static const std::string none;
  return st == tls_reason_status ? tls_reason : none;
}

}  // namespace rt::emu::blas

using rt::emu::blas::live;
using rt::emu::blas::refuse;

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: the handle pointer is null");
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate: cudaGetDevice failed (no current CUDA device)");
  auto* h = new cublasContext;
  h->device = device;
  std::lock_guard<std::mutex> g(rt::emu::blas::g_handles_mu);
  rt::emu::blas::handles().insert(h);
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

// cuBLAS synchronises the device here; the fake need not: queued GEMMs hold copies of
// everything they use from the handle (cublas_gemm.cc), so the handle can go at once.
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  {
    std::lock_guard<std::mutex> g(rt::emu::blas::g_handles_mu);
    if (!rt::emu::blas::handles().erase(handle)) handle = nullptr;
  }
  if (!handle)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED,
                  "cublasDestroy: not a live handle (never made by cublasCreate, or destroyed already)");
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

// As in cuBLAS the stream is not checked here; a GEMM on a destroyed stream or one of
// another device fails with CUBLAS_STATUS_EXECUTION_FAILED, saying which.
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  cublasContext* h = live(handle);
  if (!h) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream: not a live handle (cublasCreate first)");
  h->stream.store(stream);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  cublasContext* h = live(handle);
  if (!h) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetStream: not a live handle (cublasCreate first)");
  if (!stream) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasGetStream: the stream pointer is null");
  *stream = h->stream.load();
  return CUBLAS_STATUS_SUCCESS;
}

// The modes the GEMMs emulate (cublas_gemm.cc, Note [TF32 in the fake]): default, pedantic
// and TF32, each with or without CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (the fake
// always reduces bf16/f16 products in f32). cuBLAS's other modes let it pick lower-precision
// paths the fake does not model; they are refused rather than silently ignored.
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  cublasContext* h = live(handle);
  if (!h) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetMathMode: not a live handle (cublasCreate first)");
  const int base = int(mode) & ~int(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  switch (base) {
    case CUBLAS_DEFAULT_MATH:
    case CUBLAS_PEDANTIC_MATH:
    case CUBLAS_TF32_TENSOR_OP_MATH:
      h->math_mode.store(int(mode));
      return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_TENSOR_OP_MATH:
    case CUBLAS_FP32_EMULATED_BF16X9_MATH:
    case CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "cublasSetMathMode(" + std::to_string(int(mode)) +
                        "): this math mode is not emulated (cuda_emu/cublas_handle.cc has default, pedantic and "
                        "TF32 math, each optionally with CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)");
    default:
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    "cublasSetMathMode(" + std::to_string(int(mode)) + "): not a cublasMath_t value");
  }
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  cublasContext* h = live(handle);
  if (!h) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetMathMode: not a live handle (cublasCreate first)");
  if (!mode) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasGetMathMode: the mode pointer is null");
  *mode = cublasMath_t(h->math_mode.load());
  return CUBLAS_STATUS_SUCCESS;
}

// ---- statuses ---------------------------------------------------------------------------------
namespace {

struct StatusText {
  cublasStatus_t status;
  const char* name;
  const char* text;
};
constexpr StatusText kStatuses[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an invalid numeric value was used as an argument"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH", "an absent device architectural feature is required"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the functionality requested is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "error detected trying to check the license"},
};

const StatusText* find_status(cublasStatus_t s) {
  for (const StatusText& t : kStatuses)
    if (t.status == s) return &t;
  return nullptr;
}

}  // namespace

const char* cublasGetStatusName(cublasStatus_t status) {
  const StatusText* t = find_status(status);
  return t ? t->name : "CUBLAS_STATUS_UNKNOWN";
}

// The text carries the fake's reason (Note [Why a status] in cublas_context.h) for the
// calling thread's last refusal with this status; the pointer stays valid until the
// thread's next refusal.
const char* cublasGetStatusString(cublasStatus_t status) {
  const StatusText* t = find_status(status);
  if (!t) return "unknown cuBLAS status";
  const std::string& why = rt::emu::blas::last_reason(status);
  if (why.empty()) return t->text;
  thread_local std::string text;
  text = std::string(t->text) + "; cuda-emu: " + why;
  return text.c_str();
}
