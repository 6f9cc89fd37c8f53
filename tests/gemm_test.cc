// cpu::gemm in every transpose/accumulate combination and on both instruction sets
// (Note [GEMM dispatch]), against a triple loop in double.
#include <cstdio>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_isa.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using SgemmFn = void (*)(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, bool,
                         float*, int64_t);

void check_sgemm(SgemmFn f, const char* isa) {
  Generator g(5);
  for (int64_t M : {1, 7, 64}) {
    for (int64_t N : {1, 13, 96})
      for (int64_t K : {1, 5, 147})
        for (int ta = 0; ta < 2; ++ta)
          for (int tb = 0; tb < 2; ++tb)
            for (int acc = 0; acc < 2; ++acc) {
              // Strided operands: one extra column of padding per row.
              const int64_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 1, ldc = N + 2;
              std::vector<float> A((ta ? K : M) * lda), B((tb ? N : K) * ldb), C(M * ldc);
              for (float& v : A) v = float(g.normal());
              for (float& v : B) v = float(g.normal());
              for (float& v : C) v = float(g.normal());
              std::vector<double> want(size_t(M * N)), got(size_t(M * N));
              for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) {
                  double s = acc ? C[i * ldc + j] : 0.0;
                  for (int64_t k = 0; k < K; ++k)
                    s += double(ta ? A[k * lda + i] : A[i * lda + k]) * double(tb ? B[j * ldb + k] : B[k * ldb + j]);
                  want[i * N + j] = s;
                }
              f(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, acc, C.data(), ldc);
              for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) got[i * N + j] = C[i * ldc + j];
              test::check_close(got, want, {1e-4, 1e-4},
                                detail::cat(isa, " M=", M, " N=", N, " K=", K, " ta=", ta, " tb=", tb, " acc=", acc));
            }
  }
}

TEST_CASE("baseline (AVX2) sgemm") { check_sgemm(&cpu::avx2::sgemm, "avx2"); }

TEST_CASE("AVX-512 sgemm") {
  if (std::string(cpu::gemm_isa()) != "avx512") {
    std::printf("SKIPPED: this CPU has no AVX-512; the AVX-512 GEMM is not run\n");
    return;
  }
  check_sgemm(&cpu::avx512::sgemm, "avx512");
}

TEST_CASE("dispatching gemm, double") {
  const int64_t M = 9, N = 11, K = 17;
  Generator g(3);
  std::vector<double> A(M * K), B(K * N), C(M * N, 0.0);
  for (double& v : A) v = g.normal();
  for (double& v : B) v = g.normal();
  cpu::gemm<double>(false, false, M, N, K, A.data(), K, B.data(), N, false, C.data(), N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
      CHECK(C[i * N + j] == doctest::Approx(s).epsilon(1e-12));
    }
}

}  // namespace
}  // namespace rt
