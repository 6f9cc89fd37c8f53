// The arithmetic of the cuBLAS fake's GEMMs: Eigen products over the operands in place
// (Eigen::Map with the leading dimension as outer stride), in the precision cuBLAS's
// compute type promises.
//
// Note [TF32 in the fake]
// With CUBLAS_COMPUTE_32F_FAST_TF32, or CUBLAS_COMPUTE_32F on a handle in
// CUBLAS_TF32_TENSOR_OP_MATH, cuBLAS may run f32 GEMMs on tensor cores, which read each
// input with TF32's 10 explicit mantissa bits and accumulate in f32. The fake rounds both
// inputs to TF32 (nearest even) and then multiplies in f32: results differ from plain f32
// as much as on the GPU, so a test that needs f32 accuracy and leaves TF32 on fails here as
// it would there.
//
// Note [Half inputs, one rounding]
// bf16 and f16 GEMMs (compute type 32F) widen A and B to f32, accumulate in f32, form alpha
// AB + beta C in f32, and round once to the storage type, as cuBLAS's kernels do with f32
// accumulators (the handle disallows reduced-precision split-K reductions, blas.cu).
#include "cuda_emu/cublas_math.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <Eigen/Dense>
#include <bit>
#include <cmath>
#include <type_traits>

namespace rt::emu::blas {
namespace {

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;  // column-major, as cuBLAS
template <typename T>
using ConstMap = Eigen::Map<const Mat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using MutMap = Eigen::Map<Mat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// A stored operand: op(X) is rows x cols, so X itself is cols x rows when transposed.
template <typename T>
ConstMap<T> stored(const void* p, bool trans, int64_t rows, int64_t cols, int64_t ld) {
  const auto* q = static_cast<const T*>(p);
  return trans ? ConstMap<T>(q, cols, rows, Eigen::OuterStride<>(ld))
               : ConstMap<T>(q, rows, cols, Eigen::OuterStride<>(ld));
}

// op(a) op(b), a and b as stored.
template <typename MA, typename MB>
Mat<typename MA::Scalar> multiply(const MA& a, bool ta, const MB& b, bool tb) {
  Mat<typename MA::Scalar> p;
  if (!ta && !tb) p.noalias() = a * b;
  else if (ta && !tb) p.noalias() = a.transpose() * b;
  else if (!ta && tb) p.noalias() = a * b.transpose();
  else p.noalias() = a.transpose() * b.transpose();
  return p;
}

const void* offset(const void* p, int64_t elems, size_t size) {
  return static_cast<const char*>(p) + elems * int64_t(size);
}
void* offset(void* p, int64_t elems, size_t size) { return static_cast<char*>(p) + elems * int64_t(size); }

// C = alpha p + beta C in T; p == nullptr: alpha op(A) op(B) is zero (alpha == 0 or k == 0).
template <typename T>
void update(MutMap<T> c, const Mat<T>* p, T alpha, T beta) {
  if (!p) {
    if (beta == T(0)) c.setZero();  // as BLAS: NaN in C does not survive beta == 0
    else c *= beta;
    return;
  }
  if (beta == T(0)) c = alpha * *p;
  else c = alpha * *p + beta * c;
}

// f32 (optionally TF32 inputs) and f64, batch i.
template <typename T>
void gemm_native(const GemmJob& j, int64_t i) {
  MutMap<T> c(static_cast<T*>(offset(j.c, i * j.stride_c, sizeof(T))), j.m, j.n, Eigen::OuterStride<>(j.ldc));
  const T alpha = T(j.alpha), beta = T(j.beta);
  if (j.alpha == 0 || j.k == 0) return update<T>(c, nullptr, alpha, beta);
  const ConstMap<T> a = stored<T>(offset(j.a, i * j.stride_a, sizeof(T)), j.ta, j.m, j.k, j.lda);
  const ConstMap<T> b = stored<T>(offset(j.b, i * j.stride_b, sizeof(T)), j.tb, j.k, j.n, j.ldb);
  const Mat<T> p = [&] {
    if constexpr (std::is_same_v<T, float>) {
      if (j.tf32) {  // Note [TF32 in the fake]
        const Mat<float> a32 = a.unaryExpr(&round_to_tf32), b32 = b.unaryExpr(&round_to_tf32);
        return multiply(a32, j.ta, b32, j.tb);
      }
    }
    return multiply(a, j.ta, b, j.tb);
  }();
  update<T>(c, &p, alpha, beta);
}

float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
float widen(__half v) { return __half2float(v); }
void narrow(float v, __nv_bfloat16* out) { *out = __float2bfloat16(v); }
void narrow(float v, __half* out) { *out = __float2half(v); }

// rows x cols of storage type S at p (leading dimension ld) as f32.
template <typename S>
Mat<float> widened(const void* p, int64_t rows, int64_t cols, int64_t ld) {
  const auto* q = static_cast<const S*>(p);
  Mat<float> out(rows, cols);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) out(r, c) = widen(q[c * ld + r]);
  return out;
}

// bf16 and f16, batch i: Note [Half inputs, one rounding].
template <typename S>
void gemm_half(const GemmJob& j, int64_t i) {
  auto* c = static_cast<S*>(offset(j.c, i * j.stride_c, sizeof(S)));
  const float alpha = float(j.alpha), beta = float(j.beta);
  Mat<float> p;
  const bool product = j.alpha != 0 && j.k > 0;
  if (product) {
    const Mat<float> a = widened<S>(offset(j.a, i * j.stride_a, sizeof(S)), j.ta ? j.k : j.m, j.ta ? j.m : j.k, j.lda);
    const Mat<float> b = widened<S>(offset(j.b, i * j.stride_b, sizeof(S)), j.tb ? j.n : j.k, j.tb ? j.k : j.n, j.ldb);
    p = multiply(a, j.ta, b, j.tb);
  }
  for (int64_t col = 0; col < j.n; ++col)
    for (int64_t row = 0; row < j.m; ++row) {
      S& out = c[col * j.ldc + row];
      float v = product ? alpha * p(row, col) : 0.0f;
      if (beta != 0.0f) v += beta * widen(out);
      narrow(v, &out);
    }
}

}  // namespace

float round_to_tf32(float x) {
  if (std::isnan(x)) return x;  // rounding the low bits away could turn a NaN into Inf
  uint32_t bits = std::bit_cast<uint32_t>(x);
  // 13 of the 23 mantissa bits go: add just under half of the kept unit, plus the kept
  // unit's low bit, so that exact halves round to even. A carry may reach the exponent
  // (rounding up to the next binade, or to Inf past the largest finite TF32): both right.
  bits += 0x0FFFu + ((bits >> 13) & 1u);
  bits &= ~uint32_t(0x1FFF);
  return std::bit_cast<float>(bits);
}

void run_gemm(const GemmJob& j) {
  for (int64_t i = 0; i < j.batch; ++i) {
    switch (j.elem) {
      case Elem::f32: gemm_native<float>(j, i); break;
      case Elem::f64: gemm_native<double>(j, i); break;
      case Elem::bf16: gemm_half<__nv_bfloat16>(j, i); break;
      case Elem::f16: gemm_half<__half>(j, i); break;
    }
  }
}

}  // namespace rt::emu::blas
