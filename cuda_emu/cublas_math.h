// The arithmetic of the cuBLAS fake's GEMMs (cuda_emu/cublas_math.cc): one checked,
// typed description of a (strided batched) GEMM, computed with Eigen on the stream's
// worker. The API side (cuda_emu/cublas_gemm.cc) checks the arguments and queues it.
#pragma once

#include <cstdint>

namespace rt::emu::blas {

enum class Elem { f32, f64, bf16, f16 };

// C_i = alpha op(A_i) op(B_i) + beta C_i for i < batch, column-major, sizes in elements.
// Scalars are the compute type's (float for f32/bf16/f16, double for f64), kept here as
// doubles (a float converts exactly and back).
struct GemmJob {
  Elem elem = Elem::f32;
  bool tf32 = false;  // f32 inputs rounded to TF32 first (Note [TF32 in the fake])
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
};

// Computes every batch. Reads A and B only when alpha != 0 and k > 0, and C only when
// beta != 0 (as BLAS: with beta == 0, C may hold NaN).
void run_gemm(const GemmJob& j);

// f32 -> TF32 (10 explicit mantissa bits), round to nearest even; NaN and Inf kept.
float round_to_tf32(float x);

}  // namespace rt::emu::blas
