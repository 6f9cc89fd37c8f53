// The per-instruction-set GEMM entry points behind cpu::gemm (Note [GEMM dispatch]).
#pragma once

#include <cstdint>

#define RT_GEMM_DECLS                                                                                      \
  void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,   \
             int64_t ldb, bool accumulate, float* C, int64_t ldc);                                             \
  void dgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B, \
             int64_t ldb, bool accumulate, double* C, int64_t ldc);

namespace rt::cpu::avx2 {
RT_GEMM_DECLS
}
namespace rt::cpu::avx512 {
RT_GEMM_DECLS
}

#undef RT_GEMM_DECLS
