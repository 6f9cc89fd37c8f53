// cuBLAS's GEMMs on the emulated device: cublasGemmEx and cublasGemmStridedBatchedEx with
// cuBLAS's argument checks and statuses, queued on the handle's stream as one operation
// that declares the device memory each operand touches (cuda_emu/emu.h), computed by
// cuda_emu/cublas_math.cc when the stream reaches it.
//
// Supported, as cuBLAS supports them (A, B and C of one type): f64 with CUBLAS_COMPUTE_64F
// (or _PEDANTIC); f32 with CUBLAS_COMPUTE_32F, _PEDANTIC or _FAST_TF32; bf16 and f16 with
// CUBLAS_COMPUTE_32F (or _PEDANTIC), float scalars. Other combinations, including ones
// cuBLAS has (mixed types, 16F compute, int8), answer CUBLAS_STATUS_NOT_SUPPORTED with the
// reason (Note [Why a status] in cublas_context.h). Scalars are host pointers
// (CUBLAS_POINTER_MODE_HOST, the only mode the fake has), read during the call.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda_emu/cublas_context.h"
#include "cuda_emu/cublas_math.h"
#include "cuda_emu/emu.h"

namespace rt::emu::blas {
namespace {

struct DataType {
  Elem elem;
  int64_t size;
  const char* name;
};

bool data_type(cudaDataType t, DataType* out) {
  switch (t) {
    case CUDA_R_32F: *out = {Elem::f32, 4, "f32"}; return true;
    case CUDA_R_64F: *out = {Elem::f64, 8, "f64"}; return true;
    case CUDA_R_16BF: *out = {Elem::bf16, 2, "bf16"}; return true;
    case CUDA_R_16F: *out = {Elem::f16, 2, "f16"}; return true;
    default: return false;
  }
}

std::string type_name(cudaDataType t) {
  DataType d;
  return data_type(t, &d) ? std::string(d.name) : "cudaDataType " + std::to_string(int(t));
}

std::string compute_name(cublasComputeType_t c) {
  switch (c) {
    case CUBLAS_COMPUTE_16F: return "CUBLAS_COMPUTE_16F";
    case CUBLAS_COMPUTE_16F_PEDANTIC: return "CUBLAS_COMPUTE_16F_PEDANTIC";
    case CUBLAS_COMPUTE_32F: return "CUBLAS_COMPUTE_32F";
    case CUBLAS_COMPUTE_32F_PEDANTIC: return "CUBLAS_COMPUTE_32F_PEDANTIC";
    case CUBLAS_COMPUTE_32F_FAST_16F: return "CUBLAS_COMPUTE_32F_FAST_16F";
    case CUBLAS_COMPUTE_32F_FAST_16BF: return "CUBLAS_COMPUTE_32F_FAST_16BF";
    case CUBLAS_COMPUTE_32F_FAST_TF32: return "CUBLAS_COMPUTE_32F_FAST_TF32";
    case CUBLAS_COMPUTE_64F: return "CUBLAS_COMPUTE_64F";
    case CUBLAS_COMPUTE_64F_PEDANTIC: return "CUBLAS_COMPUTE_64F_PEDANTIC";
    case CUBLAS_COMPUTE_32I: return "CUBLAS_COMPUTE_32I";
    case CUBLAS_COMPUTE_32I_PEDANTIC: return "CUBLAS_COMPUTE_32I_PEDANTIC";
    default: return "computeType " + std::to_string(int(c));
  }
}

// The compute types the fake has for data type `e` (see the top of this file).
bool supported_compute(Elem e, cublasComputeType_t c) {
  switch (e) {
    case Elem::f64: return c == CUBLAS_COMPUTE_64F || c == CUBLAS_COMPUTE_64F_PEDANTIC;
    case Elem::f32:
      return c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC || c == CUBLAS_COMPUTE_32F_FAST_TF32;
    case Elem::bf16:
    case Elem::f16: return c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC;
  }
  return false;
}

// Every cublasGemmAlgo_t value: the fake has one algorithm and takes any of them for it.
bool known_algo(cublasGemmAlgo_t a) {
  const int v = int(a);
  return v == CUBLAS_GEMM_DEFAULT || (v >= CUBLAS_GEMM_ALGO0 && v <= CUBLAS_GEMM_ALGO23) ||
         (v >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && v <= CUBLAS_GEMM_ALGO15_TENSOR_OP) || v == CUBLAS_GEMM_AUTOTUNE;
}

bool valid_op(cublasOperation_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C; }

// Note [Exact uses]
// An operand's uses list the bytes the GEMM touches, not the span from its first byte to
// its last. Padding between columns (ld above the rows) and between batches (a stride above
// the matrix) may be never written or lie past an allocation, and a write use marks its
// bytes written (memcheck.cc, mark_uses), so a covering range would both raise false faults
// and hide never-written padding from later checks.
using Ranges = std::vector<std::pair<int64_t, int64_t>>;  // [begin, end) in elements

// Appends the elements of `batch` rows x cols matrices, leading dimension ld, `stride`
// apart. False when an offset overflows (no such operand fits in memory).
bool matrix_ranges(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch, Ranges* out) {
  const int64_t batches = stride == 0 ? 1 : batch;  // a zero stride reads one matrix for all
  for (int64_t i = 0; i < batches; ++i) {
    int64_t base;
    if (__builtin_mul_overflow(i, stride, &base)) return false;
    const int64_t pieces = ld == rows ? 1 : cols;  // contiguous columns: one piece
    const int64_t piece_len = ld == rows ? rows * cols : rows;
    for (int64_t c = 0; c < pieces; ++c) {
      int64_t begin, end;
      if (__builtin_add_overflow(base, c * ld, &begin) || __builtin_add_overflow(begin, piece_len, &end)) return false;
      out->emplace_back(begin, end);
    }
  }
  return true;
}

// Sorted, overlapping and adjacent ranges merged, as uses of `access` from `base`.
bool to_uses(Ranges r, const void* base, int64_t size, MemUse::Access access, std::vector<MemUse>* uses) {
  std::sort(r.begin(), r.end());
  Ranges merged;
  for (const auto& x : r) {
    if (!merged.empty() && x.first <= merged.back().second) merged.back().second = std::max(merged.back().second, x.second);
    else merged.push_back(x);
  }
  for (const auto& [b, e] : merged) {
    int64_t off, bytes;
    if (__builtin_mul_overflow(b, size, &off) || __builtin_mul_overflow(e - b, size, &bytes)) return false;
    // Unsigned arithmetic: an offset before the base (a negative stride) is the checker's
    // to report, not undefined behaviour here.
    const void* p = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(base) + uint64_t(off));
    uses->push_back({p, size_t(bytes), access});
  }
  return true;
}

struct GemmCall {
  const char* api;
  cublasHandle_t handle;
  cublasOperation_t transa, transb;
  int m, n, k;
  const void* alpha;
  const void* A;
  cudaDataType atype;
  int lda;
  long long stride_a;
  const void* B;
  cudaDataType btype;
  int ldb;
  long long stride_b;
  const void* beta;
  void* C;
  cudaDataType ctype;
  int ldc;
  long long stride_c;
  int batch;
  cublasComputeType_t compute;
  cublasGemmAlgo_t algo;
};

cublasStatus_t gemm(const GemmCall& g) {
  const std::string fn = g.api;
  cublasContext* h = live(g.handle);
  if (!h) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, fn + ": not a live handle (cublasCreate first; not after cublasDestroy)");

  // ---- values (CUBLAS_STATUS_INVALID_VALUE) ----
  if (!valid_op(g.transa) || !valid_op(g.transb))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": transa = " + std::to_string(int(g.transa)) + ", transb = " +
                                                   std::to_string(int(g.transb)) + ": each must be CUBLAS_OP_N, _T or _C");
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": m = " + std::to_string(g.m) + ", n = " + std::to_string(g.n) +
                                                   ", k = " + std::to_string(g.k) + ", batchCount = " +
                                                   std::to_string(g.batch) + ": none may be negative");
  const bool ta = g.transa != CUBLAS_OP_N, tb = g.transb != CUBLAS_OP_N;  // OP_C is OP_T for real types
  auto ld_check = [&](const char* name, int ld, int rows, const char* rows_name, const char* what) -> std::string {
    if (ld >= std::max(1, rows)) return "";
    return fn + ": " + name + " = " + std::to_string(ld) + " is below its minimum max(1, " + rows_name +
           ") = " + std::to_string(std::max(1, rows)) + " (" + what + ", column-major)";
  };
  for (const std::string& bad :
       {ld_check("lda", g.lda, ta ? g.k : g.m, ta ? "k" : "m", ta ? "A is stored k x m, transposed" : "A is m x k"),
        ld_check("ldb", g.ldb, tb ? g.n : g.k, tb ? "n" : "k", tb ? "B is stored n x k, transposed" : "B is k x n"),
        ld_check("ldc", g.ldc, g.m, "m", "C is m x n")})
    if (!bad.empty()) return refuse(CUBLAS_STATUS_INVALID_VALUE, bad);
  if (!g.alpha || !g.beta)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, fn + ": alpha and beta must point to host scalars (null given)");

  // ---- types and algorithm (CUBLAS_STATUS_NOT_SUPPORTED) ----
  DataType t{};
  if (!data_type(g.atype, &t) || g.btype != g.atype || g.ctype != g.atype || !supported_compute(t.elem, g.compute))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  fn + ": Atype " + type_name(g.atype) + ", Btype " + type_name(g.btype) + ", Ctype " +
                      type_name(g.ctype) + ", " + compute_name(g.compute) +
                      " is not emulated: the fake has A, B, C of one type, f64 with CUBLAS_COMPUTE_64F[_PEDANTIC], f32 "
                      "with CUBLAS_COMPUTE_32F[_PEDANTIC|_FAST_TF32], bf16 or f16 with CUBLAS_COMPUTE_32F[_PEDANTIC] "
                      "(more in cuda_emu/cublas_gemm.cc and cublas_math.cc)");
  if (!known_algo(g.algo))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn + ": algo " + std::to_string(int(g.algo)) + " is not a cublasGemmAlgo_t");

  // ---- the device: the handle's, current, and its stream's ----
  int current = -1;
  cudaGetDevice(&current);
  if (current != h->device)
    return refuse(CUBLAS_STATUS_EXECUTION_FAILED,
                  fn + ": the handle belongs to cuda:" + std::to_string(h->device) + " but cuda:" +
                      std::to_string(current) + " is current (cudaSetDevice(" + std::to_string(h->device) +
                      ") before the call, or one handle per device)");
  const cudaStream_t stream = h->stream.load();
  const int stream_dev = stream_device(stream);
  if (stream_dev != h->device)
    return refuse(CUBLAS_STATUS_EXECUTION_FAILED,
                  fn + (stream_dev < 0 ? ": the handle's stream is not a live stream (destroyed? cublasSetStream a live one)"
                                       : ": the handle's stream belongs to cuda:" + std::to_string(stream_dev) +
                                             ", the handle to cuda:" + std::to_string(h->device)));

  // ---- quick returns, as BLAS ----
  if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
  GemmJob j;
  j.elem = t.elem;
  if (t.elem == Elem::f64) {
    j.alpha = *static_cast<const double*>(g.alpha);
    j.beta = *static_cast<const double*>(g.beta);
  } else {
    j.alpha = *static_cast<const float*>(g.alpha);
    j.beta = *static_cast<const float*>(g.beta);
  }
  const bool product = j.alpha != 0 && g.k > 0;
  if (!product && j.beta == 1) return CUBLAS_STATUS_SUCCESS;  // C unchanged

  // Note [TF32 in the fake] (cublas_math.cc).
  const int mode = h->math_mode.load() & ~int(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  j.tf32 = t.elem == Elem::f32 && (g.compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                                   (g.compute == CUBLAS_COMPUTE_32F && mode == CUBLAS_TF32_TENSOR_OP_MATH));
  j.ta = ta;
  j.tb = tb;
  j.m = g.m, j.n = g.n, j.k = g.k;
  j.a = g.A, j.lda = g.lda, j.stride_a = g.stride_a;
  j.b = g.B, j.ldb = g.ldb, j.stride_b = g.stride_b;
  j.c = g.C, j.ldc = g.ldc, j.stride_c = g.stride_c;
  j.batch = g.batch;

  // Note [Exact uses]. A and B are read only when there is a product; C only when beta != 0.
  std::vector<MemUse> uses;
  bool fits = true;
  if (product) {
    Ranges a, b;
    fits = matrix_ranges(ta ? g.k : g.m, ta ? g.m : g.k, g.lda, g.stride_a, g.batch, &a) &&
           matrix_ranges(tb ? g.n : g.k, tb ? g.k : g.n, g.ldb, g.stride_b, g.batch, &b) &&
           to_uses(std::move(a), g.A, t.size, MemUse::read, &uses) && to_uses(std::move(b), g.B, t.size, MemUse::read, &uses);
  }
  Ranges c;
  fits = fits && matrix_ranges(g.m, g.n, g.ldc, g.stride_c, g.batch, &c) &&
         to_uses(std::move(c), g.C, t.size, j.beta == 0 ? MemUse::write : MemUse::read_write, &uses);
  if (!fits)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  fn + ": an operand's extent (leading dimension x columns, batch stride x batchCount) overflows 64 bits");

  // The operation's name is the kernel's in reports and in CUPTI's records.
  const std::string name = fn + " " + t.name + (j.tf32 ? "/tf32 " : " ") + (ta ? "t" : "n") + (tb ? "t" : "n");
  // The kernel lab's view (emu.h): 2mnk FLOPs per matrix; A, B read once, C written once
  // (read too when beta != 0); bf16/f16 and TF32 on the tensor cores.
  LibraryCost cost;
  cost.api = fn;
  cost.shape = "m " + std::to_string(g.m) + " n " + std::to_string(g.n) + " k " + std::to_string(g.k) +
               (g.batch > 1 ? " batch " + std::to_string(g.batch) : "");
  const double mats = double(g.batch), sz = double(t.size);
  cost.flops = product ? 2.0 * double(g.m) * double(g.n) * double(g.k) * mats : 0.0;
  cost.min_bytes = mats * sz * ((product ? double(g.m) * double(g.k) + double(g.k) * double(g.n) : 0.0) +
                                double(g.m) * double(g.n) * (j.beta == 0 ? 1.0 : 2.0));
  cost.math = t.elem == Elem::bf16 ? "bf16" : t.elem == Elem::f16 ? "f16" : t.elem == Elem::f64 ? "f64-tensor"
              : j.tf32                ? "tf32"
                                      : "f32";
  const cudaError_t e = enqueue(stream, name, std::move(uses), [j] { run_gemm(j); }, std::move(cost));
  if (e != cudaSuccess)
    return refuse(CUBLAS_STATUS_EXECUTION_FAILED,
                  fn + ": queueing on the stream failed: " + cudaGetErrorName(e) + " (an earlier fault on cuda:" +
                      std::to_string(h->device) + "?)");
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace rt::emu::blas

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return rt::emu::blas::gemm({"cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0,
                              beta, C, Ctype, ldc, 0, 1, computeType, algo});
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  return rt::emu::blas::gemm({"cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                              strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType,
                              algo});
}
