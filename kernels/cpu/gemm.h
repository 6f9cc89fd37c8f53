// Dense matrix products for the CPU backend, row-major:
//   C (M x N, row stride ldc) = op(A) * op(B) + (accumulate ? C : 0)
// op(A) is M x K: A itself (M x K, stride lda) or, with trans_a, the transpose of a
// K x M matrix. Likewise op(B) is K x N.
//
// Note [GEMM dispatch]
// The work is Eigen's GEMM, compiled twice: for x86-64-v3 (AVX2 + FMA, the build's
// baseline) and for x86-64-v4 (AVX-512), chosen once at run time from the CPU's features.
// AVX-512 doubles the FMA width and is ~1.4x faster here; the baseline keeps binaries
// portable. gemm_avx512.cc renames Eigen's namespace so its template instantiations cannot
// be merged with the baseline's by the linker (see the check in
// tests/gemm_isolation_test.sh).
#pragma once

#include <cstdint>

namespace rt::cpu {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
          bool accumulate, T* C, int64_t ldc);

// The instruction set gemm runs with: "avx512" or "avx2".
const char* gemm_isa();

}  // namespace rt::cpu
