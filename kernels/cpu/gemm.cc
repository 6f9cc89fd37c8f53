#include "kernels/cpu/gemm.h"

#include "kernels/cpu/gemm_isa.h"

namespace rt::cpu {
namespace {

bool have_avx512() {
  // x86-64-v4's feature set, which gemm_avx512.cc is compiled for.
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512cd");
  return yes;
}

}  // namespace

const char* gemm_isa() { return have_avx512() ? "avx512" : "avx2"; }

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  if (have_avx512()) avx512::sgemm(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
  else avx2::sgemm(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
}

template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
                  int64_t ldb, bool accumulate, double* C, int64_t ldc) {
  if (have_avx512()) avx512::dgemm(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
  else avx2::dgemm(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
}

}  // namespace rt::cpu
