// The cuBLAS fake of --config=cuda-emu (cuda_emu/cublas_*.cc) against an independent naive
// triple loop in double: every dtype and compute mode the engine uses, all four transpose
// combinations, odd sizes, padded leading dimensions, strided batches with never-written
// gaps, alpha/beta (beta = 0 over NaN), TF32 rounding, BLAS's quick returns, bad arguments
// and their statuses, and bugs the emulator must catch in the queued work (a C buffer one
// element short, a missing cross-stream wait). Outside --config=cuda-emu it says SKIPPED.
#include <doctest/doctest.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdio>

#if RINGTAPE_CUDA_EMU
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_emu/emu.h"

namespace {

// ---- element types -------------------------------------------------------------------------
struct DType {
  const char* name;
  cudaDataType type;
  size_t size;
  cublasComputeType_t compute;
  cublasMath_t math;
  bool tf32;  // what cuBLAS does with this compute type and math mode
};
const DType kF64{"f64", CUDA_R_64F, 8, CUBLAS_COMPUTE_64F, CUBLAS_DEFAULT_MATH, false};
const DType kF32{"f32", CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH, false};
const DType kF32FastTf32{"f32 COMPUTE_32F_FAST_TF32", CUDA_R_32F, 4, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_DEFAULT_MATH, true};
const DType kF32Tf32Math{"f32 TF32_TENSOR_OP_MATH", CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_TF32_TENSOR_OP_MATH, true};
const DType kBF16{"bf16", CUDA_R_16BF, 2, CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH, false};
const DType kF16{"f16", CUDA_R_16F, 2, CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH, false};
const DType* const kTypes[] = {&kF64, &kF32, &kF32FastTf32, &kF32Tf32Math, &kBF16, &kF16};

void put(const DType& t, double v, void* p) {
  switch (t.type) {
    case CUDA_R_64F: std::memcpy(p, &v, 8); break;
    case CUDA_R_32F: {
      const float f = float(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case CUDA_R_16BF: {
      const __nv_bfloat16 h = __float2bfloat16(float(v));
      std::memcpy(p, &h, 2);
      break;
    }
    default: {
      const __half h = __float2half(float(v));
      std::memcpy(p, &h, 2);
    }
  }
}

double get(const DType& t, const void* p) {
  switch (t.type) {
    case CUDA_R_64F: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case CUDA_R_32F: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case CUDA_R_16BF: {
      __nv_bfloat16 h;
      std::memcpy(&h, p, 2);
      return __bfloat162float(h);
    }
    default: {
      __half h;
      std::memcpy(&h, p, 2);
      return __half2float(h);
    }
  }
}

// TF32 as the reference sees it, by a different road than the fake's bit arithmetic: the
// significand scaled to 11 bits and rounded to nearest even (nearbyint's default mode).
double tf32(double x) {
  if (!std::isfinite(x) || x == 0) return x;
  int e = 0;
  const double m = std::frexp(x, &e);  // |m| in [0.5, 1): 11 significant bits = m * 2^11
  return std::ldexp(std::nearbyint(std::ldexp(m, 11)), e - 11);
}

// Half a unit in the last place of the storage type at |v| (0 for f32/f64: their rounding
// is part of the accumulation bound).
double half_ulp(const DType& t, double v) {
  const int bits = t.type == CUDA_R_16BF ? 8 : t.type == CUDA_R_16F ? 11 : 0;
  if (bits == 0) return 0;
  const double a = std::max(std::fabs(v), t.type == CUDA_R_16F ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126));
  int e = 0;
  std::frexp(a, &e);
  return std::ldexp(1.0, e - bits - 1);
}

// Unit roundoff of the accumulation: double for f64, float for the rest.
double unit_roundoff(const DType& t) { return t.type == CUDA_R_64F ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }

// ---- device memory -------------------------------------------------------------------------
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) { REQUIRE(cudaMalloc(&p, n) == cudaSuccess); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void upload(const std::vector<unsigned char>& h, size_t offset = 0) {
    REQUIRE(cudaMemcpy(static_cast<char*>(p) + offset, h.data(), h.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<unsigned char> download() const {
    std::vector<unsigned char> h(bytes);
    REQUIRE(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

// A column-major matrix on the host: values (what the storage type holds) and its bytes;
// padding rows (ld > rows) hold `pad`.
struct HostMat {
  int rows = 0, cols = 0, ld = 0;
  std::vector<double> v;
  std::vector<unsigned char> bytes;
  double at(int r, int c) const { return v[size_t(c) * ld + r]; }
};

HostMat make_mat(const DType& t, int rows, int cols, int ld, std::mt19937& rng, bool nan_everywhere) {
  HostMat m;
  m.rows = rows, m.cols = cols, m.ld = ld;
  const size_t n = size_t(ld) * cols;
  m.v.resize(n);
  m.bytes.resize(n * t.size);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (size_t i = 0; i < n; ++i) {
    const bool pad = int(i % size_t(ld)) >= rows;
    put(t, pad || nan_everywhere ? std::numeric_limits<double>::quiet_NaN() : u(rng), &m.bytes[i * t.size]);
    m.v[i] = get(t, &m.bytes[i * t.size]);
  }
  return m;
}

// op(X)(r, c) for a stored matrix.
double op_at(const HostMat& x, bool trans, int r, int c) { return trans ? x.at(c, r) : x.at(r, c); }

cublasStatus_t gemm(cublasHandle_t h, const DType& t, bool ta, bool tb, int m, int n, int k, double alpha,
                    const void* A, int lda, long long sa, const void* B, int ldb, long long sb, double beta, void* C,
                    int ldc, long long sc, int batch /* 0: cublasGemmEx */) {
  const float af = float(alpha), bf = float(beta);
  const void* pa = t.type == CUDA_R_64F ? static_cast<const void*>(&alpha) : &af;
  const void* pb = t.type == CUDA_R_64F ? static_cast<const void*>(&beta) : &bf;
  const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  REQUIRE(cublasSetMathMode(h, t.math) == CUBLAS_STATUS_SUCCESS);
  if (batch == 0)
    return cublasGemmEx(h, oa, ob, m, n, k, pa, A, t.type, lda, B, t.type, ldb, pb, C, t.type, ldc, t.compute,
                        CUBLAS_GEMM_DEFAULT);
  return cublasGemmStridedBatchedEx(h, oa, ob, m, n, k, pa, A, t.type, lda, sa, B, t.type, ldb, sb, pb, C, t.type, ldc,
                                    sc, batch, t.compute, CUBLAS_GEMM_DEFAULT);
}

// Checks C (its m x n part) against the naive triple loop in double over the same
// storage-type inputs: |got - ref| <= half an ulp of the storage type (the one final
// rounding of bf16/f16) + 2 (k + 2) u sum(|alpha a b|) + |beta c| terms (the accumulation).
// Returns the number of elements out of bounds; the first few are printed.
int check_product(const DType& t, bool ta, bool tb, int m, int n, int k, double alpha, const HostMat& a,
                  const HostMat& b, double beta, const HostMat& c0, const HostMat& got, const std::string& what) {
  int bad = 0;
  const double u = unit_roundoff(t);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double ref = 0, scale = 0;
      for (int l = 0; l < k; ++l) {
        double x = op_at(a, ta, i, l), y = op_at(b, tb, l, j);
        if (t.tf32) x = tf32(x), y = tf32(y);
        ref += x * y;
        scale += std::fabs(x * y);
      }
      ref *= alpha;
      scale *= std::fabs(alpha);
      if (beta != 0) {
        ref += beta * c0.at(i, j);
        scale += std::fabs(beta * c0.at(i, j));
      }
      const double g = got.at(i, j);
      const double tol = std::max(half_ulp(t, ref), half_ulp(t, g)) + 2.0 * (k + 2) * u * scale;
      if (!(std::fabs(g - ref) <= tol)) {
        if (++bad <= 3)
          MESSAGE(what, ": C(", i, ", ", j, ") = ", g, ", the reference says ", ref, " (tolerance ", tol, ")");
      }
    }
  return bad;
}

HostMat from_device(const DType& t, const std::vector<unsigned char>& bytes, size_t offset_bytes, int rows, int cols,
                    int ld) {
  HostMat m;
  m.rows = rows, m.cols = cols, m.ld = ld;
  m.v.resize(size_t(ld) * cols);
  for (size_t i = 0; i < m.v.size(); ++i) m.v[i] = get(t, &bytes[offset_bytes + i * t.size]);
  return m;
}

struct Handle {
  cublasHandle_t h = nullptr;
  Handle() { REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS); }
  ~Handle() { CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS); }
};

void expect_clean() {
  const cudaError_t e = cudaDeviceSynchronize();
  REQUIRE_MESSAGE(e == cudaSuccess, cudaGetErrorString(e));
}

// The queued work ended in a fault whose report has every one of `parts`; cleared after.
void expect_fault(const std::vector<std::string>& parts) {
  const cudaError_t e = cudaDeviceSynchronize();
  CHECK_MESSAGE(e != cudaSuccess, "the planted bug was not caught");
  const std::string report = rt::emu::last_fault();
  for (const std::string& p : parts) CHECK_MESSAGE(report.find(p) != std::string::npos, "'", p, "' not in:\n", report);
  rt::emu::clear_faults();
}

}  // namespace

TEST_CASE("cublasGemmEx: every dtype, transposes, odd sizes, padded leading dimensions, alpha/beta") {
  Handle handle;
  std::mt19937 rng(20240611);
  const int sizes[] = {1, 7, 33};
  struct Scalars {
    double alpha, beta;
  };
  const Scalars scalars[] = {{1.0, 0.0}, {-0.75, 0.5}, {0.5, 1.0}, {2.0, -1.25}};
  int cases = 0, failed = 0, counter = 0;
  for (const DType* tp : kTypes) {
    const DType& t = *tp;
    for (int tr = 0; tr < 4; ++tr)
      for (int m : sizes)
        for (int n : sizes)
          for (int k : sizes)
            for (int pad : {0, 3}) {
              const bool ta = tr & 1, tb = tr & 2;
              const Scalars s = scalars[counter++ % 4];
              const int lda = (ta ? k : m) + pad, ldb = (tb ? n : k) + pad, ldc = m + pad;
              // beta == 0: C holds NaN everywhere, which must not show through.
              const HostMat a = make_mat(t, ta ? k : m, ta ? m : k, lda, rng, false);
              const HostMat b = make_mat(t, tb ? n : k, tb ? k : n, ldb, rng, false);
              const HostMat c0 = make_mat(t, m, n, ldc, rng, s.beta == 0);
              DevBuf da(a.bytes.size()), db(b.bytes.size()), dc(c0.bytes.size());
              da.upload(a.bytes), db.upload(b.bytes), dc.upload(c0.bytes);
              const cublasStatus_t st = gemm(handle.h, t, ta, tb, m, n, k, s.alpha, da.p, lda, 0, db.p, ldb, 0, s.beta,
                                             dc.p, ldc, 0, 0);
              REQUIRE(st == CUBLAS_STATUS_SUCCESS);
              const std::vector<unsigned char> out = dc.download();
              const std::string what = std::string(t.name) + (ta ? " T" : " N") + (tb ? "T" : "N") + " m=" +
                                       std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                       " pad=" + std::to_string(pad);
              const HostMat got = from_device(t, out, 0, m, n, ldc);
              int bad = check_product(t, ta, tb, m, n, k, s.alpha, a, b, s.beta, c0, got, what);
              // The padding rows of C are not C's: untouched, bit for bit.
              for (int j = 0; j < n; ++j)
                for (int i = m; i < ldc; ++i) {
                  const size_t at = (size_t(j) * ldc + i) * t.size;
                  if (std::memcmp(&out[at], &c0.bytes[at], t.size) != 0 && ++bad <= 3)
                    MESSAGE(what, ": padding C(", i, ", ", j, ") was written");
                }
              ++cases;
              failed += bad != 0;
            }
  }
  expect_clean();
  MESSAGE(cases, " GEMMs checked, ", failed, " failed");
  CHECK(cases == 6 * 4 * 27 * 2);
  CHECK(failed == 0);
}

TEST_CASE("cublasGemmStridedBatchedEx: strided batches with never-written gaps, and a broadcast A") {
  Handle handle;
  std::mt19937 rng(7);
  const int m = 7, n = 33, k = 5, batch = 3;
  int failed = 0, cases = 0;
  for (const DType* tp : kTypes) {
    const DType& t = *tp;
    for (int tr = 0; tr < 4; ++tr)
      for (bool broadcast_a : {false, true}) {
        const bool ta = tr & 1, tb = tr & 2;
        const int lda = ta ? k : m, ldb = tb ? n : k, ldc = m;
        // Each batch's matrix, then a gap of 5 elements that nothing ever writes.
        const long long sa = broadcast_a ? 0 : (long long)lda * (ta ? m : k) + 5;
        const long long sb = (long long)ldb * (tb ? k : n) + 5, sc = (long long)ldc * n + 5;
        DevBuf da(size_t(broadcast_a ? lda * (ta ? m : k) : sa * batch) * t.size);
        DevBuf db(size_t(sb * batch) * t.size), dc(size_t(sc * batch) * t.size);
        std::vector<HostMat> as, bs;
        for (int i = 0; i < batch; ++i) {
          if (i == 0 || !broadcast_a) {
            as.push_back(make_mat(t, ta ? k : m, ta ? m : k, lda, rng, false));
            da.upload(as.back().bytes, size_t(i * sa) * t.size);
          }
          bs.push_back(make_mat(t, tb ? n : k, tb ? k : n, ldb, rng, false));
          db.upload(bs.back().bytes, size_t(i * sb) * t.size);
        }
        // C never written before: beta == 0 must only write it.
        const double alpha = 1.25;
        REQUIRE(gemm(handle.h, t, ta, tb, m, n, k, alpha, da.p, lda, sa, db.p, ldb, sb, 0.0, dc.p, ldc, sc, batch) ==
                CUBLAS_STATUS_SUCCESS);
        expect_clean();
        const std::vector<unsigned char> out = dc.download();
        const std::string what = std::string(t.name) + (ta ? " T" : " N") + (tb ? "T" : "N") +
                                 (broadcast_a ? " strideA=0" : "");
        HostMat none;
        int bad = 0;
        std::vector<HostMat> c1;
        for (int i = 0; i < batch; ++i) {
          c1.push_back(from_device(t, out, size_t(i * sc) * t.size, m, n, ldc));
          bad += check_product(t, ta, tb, m, n, k, alpha, as[broadcast_a ? 0 : i], bs[i], 0.0, none, c1.back(),
                               what + " batch " + std::to_string(i));
          // The gap after each C matrix is still never written (the uses were exact).
          const char* gap = static_cast<const char*>(dc.p) + size_t(i * sc + ldc * n) * t.size;
          CHECK_MESSAGE(rt::emu::first_uninitialised(gap, 5 * t.size) == 0, what, ": the gap after C batch ", i,
                        " was marked written");
        }
        // Again with beta != 0: now C is read too.
        REQUIRE(gemm(handle.h, t, ta, tb, m, n, k, -0.5, da.p, lda, sa, db.p, ldb, sb, 0.75, dc.p, ldc, sc, batch) ==
                CUBLAS_STATUS_SUCCESS);
        const std::vector<unsigned char> out2 = dc.download();
        for (int i = 0; i < batch; ++i) {
          const HostMat c2 = from_device(t, out2, size_t(i * sc) * t.size, m, n, ldc);
          bad += check_product(t, ta, tb, m, n, k, -0.5, as[broadcast_a ? 0 : i], bs[i], 0.75, c1[i], c2,
                               what + " beta batch " + std::to_string(i));
        }
        ++cases;
        failed += bad != 0;
      }
  }
  MESSAGE(cases, " batched GEMMs (x2 calls, 3 batches each) checked, ", failed, " failed");
  CHECK(failed == 0);
}

TEST_CASE("TF32: inputs rounded to 10 mantissa bits, nearest even, NaN and Inf kept, only when asked") {
  Handle handle;
  DevBuf a(4), b(4), c(4);
  const float one = 1.0f;
  std::vector<unsigned char> ob(4);
  std::memcpy(ob.data(), &one, 4);
  b.upload(ob);
  auto run = [&](float x, cublasComputeType_t compute, cublasMath_t math) {
    std::vector<unsigned char> ab(4);
    std::memcpy(ab.data(), &x, 4);
    a.upload(ab);
    REQUIRE(cublasSetMathMode(handle.h, math) == CUBLAS_STATUS_SUCCESS);
    const float alpha = 1, beta = 0;
    REQUIRE(cublasGemmEx(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &alpha, a.p, CUDA_R_32F, 1, b.p, CUDA_R_32F, 1,
                         &beta, c.p, CUDA_R_32F, 1, compute, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    float out;
    const std::vector<unsigned char> got = c.download();
    std::memcpy(&out, got.data(), 4);
    return out;
  };
  const float x = 1.0f + std::ldexp(1.0f, -12);  // an f32 value that TF32 cannot hold
  CHECK(run(x, CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH) == x);
  CHECK(run(x, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_TF32_TENSOR_OP_MATH) == x);
  CHECK(run(x, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_DEFAULT_MATH) == 1.0f);
  CHECK(run(x, CUBLAS_COMPUTE_32F, CUBLAS_TF32_TENSOR_OP_MATH) == 1.0f);
  CHECK(run(x, CUBLAS_COMPUTE_32F,
            cublasMath_t(CUBLAS_TF32_TENSOR_OP_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) == 1.0f);
  const cublasComputeType_t fast = CUBLAS_COMPUTE_32F_FAST_TF32;
  // Exact halves of TF32's unit (2^-10 at 1) go to the even neighbour.
  CHECK(run(1.0f + std::ldexp(1.0f, -11), fast, CUBLAS_DEFAULT_MATH) == 1.0f);
  CHECK(run(1.0f + 3 * std::ldexp(1.0f, -11), fast, CUBLAS_DEFAULT_MATH) == 1.0f + std::ldexp(1.0f, -9));
  CHECK(run(-(1.0f + 3 * std::ldexp(1.0f, -11)), fast, CUBLAS_DEFAULT_MATH) == -(1.0f + std::ldexp(1.0f, -9)));
  // Just above a half rounds up; just below rounds down.
  CHECK(run(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -23), fast, CUBLAS_DEFAULT_MATH) ==
        1.0f + std::ldexp(1.0f, -10));
  CHECK(run(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -23), fast, CUBLAS_DEFAULT_MATH) == 1.0f);
  CHECK(std::isinf(run(std::numeric_limits<float>::infinity(), fast, CUBLAS_DEFAULT_MATH)));
  CHECK(std::isnan(run(std::numeric_limits<float>::quiet_NaN(), fast, CUBLAS_DEFAULT_MATH)));
  // A NaN whose payload lies only in the bits TF32 drops stays a NaN (not Inf).
  CHECK(std::isnan(run(std::bit_cast<float>(0x7f800001u), fast, CUBLAS_DEFAULT_MATH)));
  // The largest f32 is past TF32's largest finite value's halfway point: it rounds to Inf.
  CHECK(std::isinf(run(std::numeric_limits<float>::max(), fast, CUBLAS_DEFAULT_MATH)));
  expect_clean();
}

TEST_CASE("BLAS quick returns: k == 0 or alpha == 0 scale C by beta and read neither A nor B") {
  Handle handle;
  const DType& t = kF32;
  std::mt19937 rng(3);
  const HostMat c0 = make_mat(t, 4, 3, 4, rng, false);
  DevBuf never_written(64), c(c0.bytes.size());  // A and B: reading them would be a fault
  for (const auto& [k, alpha, beta] : {std::tuple{0, 1.0, 2.0}, std::tuple{5, 0.0, -3.0}, std::tuple{0, 1.0, 0.0}}) {
    c.upload(c0.bytes);
    REQUIRE(gemm(handle.h, t, false, false, 4, 3, k, alpha, never_written.p, 4, 0, never_written.p, std::max(1, k), 0,
                 beta, c.p, 4, 0, 0) == CUBLAS_STATUS_SUCCESS);
    const HostMat got = from_device(t, c.download(), 0, 4, 3, 4);
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 4; ++i) CHECK(got.at(i, j) == float(beta * c0.at(i, j)));
  }
  // m == 0, n == 0 or batchCount == 0: nothing at all, even with unwritten C.
  const float one = 1;
  CHECK(cublasGemmEx(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 3, 2, &one, never_written.p, CUDA_R_32F, 1, never_written.p,
                     CUDA_R_32F, 2, &one, never_written.p, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasGemmStridedBatchedEx(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, never_written.p, CUDA_R_32F, 2,
                                   4, never_written.p, CUDA_R_32F, 2, 4, &one, never_written.p, CUDA_R_32F, 2, 4, 0,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  expect_clean();
}

TEST_CASE("bad arguments: cuBLAS's statuses, nothing queued, and the reason in the status string") {
  Handle handle;
  cublasHandle_t h = handle.h;
  const int m = 4, n = 3, k = 2;
  DevBuf a(m * k * 4), b(k * n * 4), c(m * n * 4);
  std::vector<unsigned char> init(m * n * 4, 0x3f);
  a.upload(std::vector<unsigned char>(m * k * 4, 0x3f));
  b.upload(std::vector<unsigned char>(k * n * 4, 0x3f));
  c.upload(init);
  const float one = 1, zero = 0;
  const double one_d = 1;
  auto ex = [&](cublasHandle_t hh, cublasOperation_t ta, int mm, int nn, int kk, const void* alpha, cudaDataType at,
                int lda, int ldb, cudaDataType ct, int ldc, cublasComputeType_t compute,
                cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT) {
    return cublasGemmEx(hh, ta, CUBLAS_OP_N, mm, nn, kk, alpha, a.p, at, lda, b.p, at, ldb, &zero, c.p, ct, ldc, compute,
                        algo);
  };
  const auto N = CUBLAS_OP_N, T = CUBLAS_OP_T;
  const auto F = CUDA_R_32F;
  const auto C32 = CUBLAS_COMPUTE_32F;
  // The good calls, for contrast (transposed, lda = k is enough).
  CHECK(ex(h, N, m, n, k, &one, F, m, k, F, m, C32) == CUBLAS_STATUS_SUCCESS);
  CHECK(ex(h, T, m, n, k, &one, F, k, k, F, m, C32) == CUBLAS_STATUS_SUCCESS);
  expect_clean();
  c.upload(init);

  CHECK(ex(nullptr, N, m, n, k, &one, F, m, k, F, m, C32) == CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK(ex(h, N, -1, n, k, &one, F, m, k, F, m, C32) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(ex(h, N, m, -1, k, &one, F, m, k, F, m, C32) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(ex(h, N, m, n, -1, &one, F, m, k, F, m, C32) == CUBLAS_STATUS_INVALID_VALUE);
  // An enumerator gemm does not take (a value outside the enumeration's range, such as 7, would
  // itself be undefined behaviour: UBSan reports forming it).
  CHECK(ex(h, CUBLAS_OP_CONJG, m, n, k, &one, F, m, k, F, m, C32) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(ex(h, N, m, n, k, &one, F, m - 1, k, F, m, C32) == CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  CHECK(ex(h, T, m, n, k, &one, F, k - 1, k, F, m, C32) == CUBLAS_STATUS_INVALID_VALUE);  // lda < k, transposed
  CHECK(ex(h, N, m, n, k, &one, F, m, k - 1, F, m, C32) == CUBLAS_STATUS_INVALID_VALUE);  // ldb < k
  CHECK(ex(h, N, m, n, k, &one, F, m, k, F, m - 1, C32) == CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
  CHECK(ex(h, N, 0, n, k, &one, F, 0, k, F, 1, C32) == CUBLAS_STATUS_INVALID_VALUE);      // lda < max(1, m)
  CHECK(ex(h, N, m, n, k, nullptr, F, m, k, F, m, C32) == CUBLAS_STATUS_INVALID_VALUE);   // no alpha
  CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE)) == "CUBLAS_STATUS_INVALID_VALUE");
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).find("alpha and beta") != std::string::npos);
  CHECK(ex(h, N, m, n, k, &one, F, m - 1, k, F, m, C32) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).find("lda = 3 is below its minimum") !=
        std::string::npos);
  CHECK(cublasGemmStridedBatchedEx(h, N, N, m, n, k, &one, a.p, F, m, 0, b.p, F, k, 0, &zero, c.p, F, m, 0, -1, C32,
                                   CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);

  CHECK(ex(h, N, m, n, k, &one, F, m, k, CUDA_R_16F, m, C32) == CUBLAS_STATUS_NOT_SUPPORTED);  // mixed types
  CHECK(ex(h, N, m, n, k, &one_d, F, m, k, F, m, CUBLAS_COMPUTE_64F) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(ex(h, N, m, n, k, &one, CUDA_R_16BF, m, k, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F_FAST_TF32) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(ex(h, N, m, n, k, &one, CUDA_R_8I, m, k, CUDA_R_8I, m, C32) == CUBLAS_STATUS_NOT_SUPPORTED);
  // 50: between CUBLAS_GEMM_ALGO23 and CUBLAS_GEMM_DEFAULT_TENSOR_OP, inside the enumeration's
  // range (-1024..1023: AUTOTUNE is 999); a value outside it would be undefined behaviour.
  CHECK(ex(h, N, m, n, k, &one, F, m, k, F, m, C32, cublasGemmAlgo_t(50)) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)).find("algo 50") != std::string::npos);

  CHECK(cublasSetMathMode(h, cublasMath_t(1234)) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSetMathMode(h, CUBLAS_TENSOR_OP_MATH) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(cublasSetStream(nullptr, nullptr) == CUBLAS_STATUS_NOT_INITIALIZED);

  // Not one of the refused calls reached the device: C is as uploaded.
  expect_clean();
  CHECK(c.download() == init);

  // A destroyed handle is not a handle.
  cublasHandle_t gone = nullptr;
  REQUIRE(cublasCreate(&gone) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasDestroy(gone) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasDestroy(gone) == CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_CASE("a handle belongs to its device; its stream is the legacy stream until cublasSetStream") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  Handle handle;  // on cuda:0
  cudaStream_t s = nullptr;
  CHECK(cublasGetStream(handle.h, &s) == CUBLAS_STATUS_SUCCESS);
  CHECK(s == nullptr);
  DevBuf a(16), c(16);
  a.upload(std::vector<unsigned char>(16, 0));
  const float one = 1, zero = 0;
  auto call = [&] {
    return cublasGemmEx(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.p, CUDA_R_32F, 2, a.p, CUDA_R_32F, 2, &zero,
                        c.p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  CHECK(call() == CUBLAS_STATUS_SUCCESS);
  expect_clean();
  if (count >= 2) {
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    CHECK(call() == CUBLAS_STATUS_EXECUTION_FAILED);
    CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_EXECUTION_FAILED)).find("cudaSetDevice(0)") !=
          std::string::npos);
    cudaStream_t other = nullptr;
    REQUIRE(cudaStreamCreate(&other) == cudaSuccess);  // a stream of cuda:1
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    REQUIRE(cublasSetStream(handle.h, other) == CUBLAS_STATUS_SUCCESS);
    CHECK(call() == CUBLAS_STATUS_EXECUTION_FAILED);
    REQUIRE(cublasSetStream(handle.h, nullptr) == CUBLAS_STATUS_SUCCESS);
    cudaStreamDestroy(other);
  } else {
    MESSAGE("one emulated device: the cross-device cases need RINGTAPE_EMU_DEVICES >= 2");
  }
}

TEST_CASE("the emulator catches a C buffer one element short, and a GEMM that misses a cross-stream wait") {
  Handle handle;
  const int m = 5, n = 4, k = 3;
  DevBuf a(m * k * 4), b(k * n * 4), short_c((m * n - 1) * 4);
  a.upload(std::vector<unsigned char>(m * k * 4, 0));
  b.upload(std::vector<unsigned char>(k * n * 4, 0));
  const float one = 1, zero = 0;
  // The call is queued and succeeds; the queued work's check of C's range catches it.
  CHECK(cublasGemmEx(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a.p, CUDA_R_32F, m, b.p, CUDA_R_32F, k, &zero,
                     short_c.p, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  expect_fault({"'cublasGemmEx f32 nn' writes 80 bytes", "out of bounds", "0 bytes past the end of the 76-byte block"});

  // A written on stream s1 (asynchronously, from pinned memory), the GEMM on s2 without an
  // event: the queued GEMM's read of A is a hazard. With the event it is ordered.
  cudaStream_t s1 = nullptr, s2 = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
  void* pinned = nullptr;
  REQUIRE(cudaMallocHost(&pinned, m * k * 4) == cudaSuccess);
  std::memset(pinned, 0, m * k * 4);
  DevBuf c(m * n * 4);
  REQUIRE(cublasSetStream(handle.h, s2) == CUBLAS_STATUS_SUCCESS);
#if defined(__SANITIZE_THREAD__)
  // Under ThreadSanitizer the planted hazard is a real race between the two streams' workers,
  // which TSan reports before the emulator's check can: only the ordered case runs.
  for (bool with_event : {true}) {
#else
  for (bool with_event : {false, true}) {
#endif
    REQUIRE(cudaMemcpyAsync(a.p, pinned, m * k * 4, cudaMemcpyHostToDevice, s1) == cudaSuccess);
    cudaEvent_t e = nullptr;
    if (with_event) {
      REQUIRE(cudaEventCreate(&e) == cudaSuccess);
      REQUIRE(cudaEventRecord(e, s1) == cudaSuccess);
      REQUIRE(cudaStreamWaitEvent(s2, e, 0) == cudaSuccess);
    }
    CHECK(cublasGemmEx(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a.p, CUDA_R_32F, m, b.p, CUDA_R_32F, k, &zero,
                       c.p, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    if (with_event) {
      expect_clean();
      cudaEventDestroy(e);
    } else {
      expect_fault({"cross-stream hazard", "'cublasGemmEx f32 nn'"});
    }
  }
  REQUIRE(cublasSetStream(handle.h, nullptr) == CUBLAS_STATUS_SUCCESS);
  cudaFreeHost(pinned);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

#else

TEST_CASE("cuBLAS fake") { std::printf("SKIPPED: the cuBLAS fake runs under --config=cuda-emu\n"); }

#endif
