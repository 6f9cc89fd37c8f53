// The cuDNN fake's direct convolution (cuda_emu/cudnn_conv.h) against a naive reference in
// double written here another way (every output gathered, or scattered, tap by tap in
// logical NCHW order): seeded random geometries (odd sizes, 1x1, strides, padding, dilation,
// groups, batch 1), forward, backward data and backward filter, NCHW, NHWC and mixed
// layouts, f32/f64/bf16/f16, both convolution modes, alpha/beta; then each engine flavour's
// numerics (TF32 inputs, down-converted inputs, storage-type accumulation, split sums) within
// the error bound that flavour implies, and different from the exact result where it must
// be. Runs on host memory: no device involved. Outside --config=cuda-emu: SKIPPED.
#include <doctest/doctest.h>

#include <cstdio>

#if RINGTAPE_CUDA_EMU
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_emu/cudnn_conv.h"
#include "cuda_emu/cudnn_numbers.h"

namespace {

using rt::emu::cudnn::ConvOp;
using rt::emu::cudnn::ConvProblem;
using rt::emu::cudnn::Numerics;

// Unit roundoff of each storage type.
double unit(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE: return std::ldexp(1.0, -53);
    case CUDNN_DATA_FLOAT: return std::ldexp(1.0, -24);
    case CUDNN_DATA_HALF: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -8);  // bf16
  }
}

// Host storage of one operand in the problem's dtype, addressed by element strides.
struct Operand {
  cudnnDataType_t t;
  std::array<int64_t, 4> dims, strides;
  std::vector<unsigned char> bytes;
  Operand(cudnnDataType_t type, std::array<int64_t, 4> d, bool channels_last) : t(type), dims(d) {
    strides = channels_last ? std::array<int64_t, 4>{d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]}
                            : std::array<int64_t, 4>{d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
    bytes.assign(size_t(d[0] * d[1] * d[2] * d[3]) * rt::emu::cudnn::dtype_size(t), 0xFF);  // NaN everywhere
  }
  int64_t at(int64_t a, int64_t b, int64_t c, int64_t e) const {
    return a * strides[0] + b * strides[1] + c * strides[2] + e * strides[3];
  }
  void set(int64_t i, double v) {
    unsigned char* p = bytes.data() + i * int64_t(rt::emu::cudnn::dtype_size(t));
    if (t == CUDNN_DATA_DOUBLE) std::memcpy(p, &v, 8);
    if (t == CUDNN_DATA_FLOAT) {
      const float f = float(v);
      std::memcpy(p, &f, 4);
    }
    if (t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16) {
      const uint16_t h = t == CUDNN_DATA_HALF ? rt::emu::cudnn::float_to_f16(float(v)) : rt::emu::cudnn::float_to_bf16(float(v));
      std::memcpy(p, &h, 2);
    }
  }
  double get(int64_t i) const {
    const unsigned char* p = bytes.data() + i * int64_t(rt::emu::cudnn::dtype_size(t));
    if (t == CUDNN_DATA_DOUBLE) {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    if (t == CUDNN_DATA_FLOAT) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return t == CUDNN_DATA_HALF ? rt::emu::cudnn::f16_to_float(h) : rt::emu::cudnn::bf16_to_float(h);
  }
  // Random normal values, stored (so rounded to the type); returns them in logical order.
  std::vector<double> fill(std::mt19937_64& rng) {
    std::normal_distribution<double> nd;
    std::vector<double> v(size_t(dims[0] * dims[1] * dims[2] * dims[3]));
    size_t k = 0;
    for (int64_t a = 0; a < dims[0]; ++a)
      for (int64_t b = 0; b < dims[1]; ++b)
        for (int64_t c = 0; c < dims[2]; ++c)
          for (int64_t e = 0; e < dims[3]; ++e, ++k) {
            set(at(a, b, c, e), nd(rng));
            v[k] = get(at(a, b, c, e));
          }
    return v;
  }
  std::vector<double> logical() const {
    std::vector<double> v;
    for (int64_t a = 0; a < dims[0]; ++a)
      for (int64_t b = 0; b < dims[1]; ++b)
        for (int64_t c = 0; c < dims[2]; ++c)
          for (int64_t e = 0; e < dims[3]; ++e) v.push_back(get(at(a, b, c, e)));
    return v;
  }
};

// The exact result (in double) of each output element and the sum of its terms' magnitudes,
// from logical NCHW / OIHW arrays.
struct Reference {
  std::vector<double> value, magnitude;
  int64_t terms = 0;  // the most terms any output sums
};

Reference naive(const ConvProblem& p, const std::vector<double>& x, const std::vector<double>& w,
                const std::vector<double>& y) {
  const int64_t Cg = p.C / p.groups, Og = p.O / p.groups;
  auto X = [&](int64_t n, int64_t c, int64_t h, int64_t v) { return ((n * p.C + c) * p.H + h) * p.W + v; };
  auto Wi = [&](int64_t o, int64_t c, int64_t h, int64_t v) {
    if (p.flip) h = p.KH - 1 - h, v = p.KW - 1 - v;
    return ((o * Cg + c) * p.KH + h) * p.KW + v;
  };
  auto Y = [&](int64_t n, int64_t o, int64_t h, int64_t v) { return ((n * p.O + o) * p.HO + h) * p.WO + v; };
  const size_t out = size_t(p.op == ConvOp::forward         ? p.N * p.O * p.HO * p.WO
                            : p.op == ConvOp::backward_data ? p.N * p.C * p.H * p.W
                                                            : p.O * Cg * p.KH * p.KW);
  Reference r{std::vector<double>(out, 0.0), std::vector<double>(out, 0.0)};
  std::vector<int64_t> count(out, 0);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t o = 0; o < p.O; ++o)
      for (int64_t oh = 0; oh < p.HO; ++oh)
        for (int64_t ow = 0; ow < p.WO; ++ow)
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < p.KH; ++kh)
              for (int64_t kw = 0; kw < p.KW; ++kw) {
                const int64_t ih = oh * p.sh - p.ph + kh * p.dh, iw = ow * p.sw - p.pw + kw * p.dw;
                if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W) continue;
                const int64_t xi = X(n, o / Og * Cg + c, ih, iw), wi = Wi(o, c, kh, kw), yi = Y(n, o, oh, ow);
                double term = 0;
                size_t at = 0;
                if (p.op == ConvOp::forward) term = x[size_t(xi)] * w[size_t(wi)], at = size_t(yi);
                if (p.op == ConvOp::backward_data) term = y[size_t(yi)] * w[size_t(wi)], at = size_t(xi);
                if (p.op == ConvOp::backward_filter) term = y[size_t(yi)] * x[size_t(xi)], at = size_t(wi);
                r.value[at] += term;
                r.magnitude[at] += std::abs(term);
                r.terms = std::max(r.terms, ++count[at]);
              }
  return r;
}

struct Run {
  std::vector<double> got, want, magnitude, old;
  int64_t terms = 0;
};

// Fills the inputs (and, when beta != 0, the output) with seeded values, runs the fake's
// convolution and the reference; `layouts`: channels-last for x, w, y.
Run run(const ConvProblem& p0, const Numerics& num, uint64_t seed, std::array<bool, 3> layouts, double alpha = 1,
        double beta = 0) {
  ConvProblem p = p0;
  std::mt19937_64 rng(seed);
  Operand x(p.dtype, {p.N, p.C, p.H, p.W}, layouts[0]), w(p.dtype, {p.O, p.C / p.groups, p.KH, p.KW}, layouts[1]),
      y(p.dtype, {p.N, p.O, p.HO, p.WO}, layouts[2]);
  p.xs = x.strides, p.ws = w.strides, p.ys = y.strides;
  Operand& outp = p.op == ConvOp::forward ? y : p.op == ConvOp::backward_data ? x : w;
  std::vector<double> xv, wv, yv;
  if (p.op != ConvOp::backward_data) xv = x.fill(rng);
  if (p.op != ConvOp::backward_filter) wv = w.fill(rng);
  if (p.op != ConvOp::forward) yv = y.fill(rng);
  Run r;
  if (beta != 0) r.old = outp.fill(rng);
  const std::vector<double> zeros_x(size_t(p.N * p.C * p.H * p.W)), zeros_w(size_t(p.O * (p.C / p.groups) * p.KH * p.KW));
  const Reference ref = naive(p, xv.empty() ? zeros_x : xv, wv.empty() ? zeros_w : wv, yv);
  rt::emu::cudnn::run_conv(p, num, x.bytes.data(), w.bytes.data(), y.bytes.data(), alpha, beta);
  r.got = outp.logical();
  r.want = ref.value;
  for (size_t i = 0; i < r.want.size(); ++i) r.want[i] = alpha * r.want[i] + (beta != 0 ? beta * r.old[i] : 0);
  r.magnitude = ref.magnitude;
  r.terms = ref.terms;
  return r;
}

// Every element within `abs_per_mag * magnitude + rel * |want| + floor`; returns the count of
// elements outside (and reports the first few).
int check(const Run& r, double abs_per_mag, double rel, double floor, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < r.got.size(); ++i) {
    const double old = r.old.empty() ? 0 : std::abs(r.old[i]);
    const double tol = abs_per_mag * r.magnitude[i] + rel * (std::abs(r.want[i]) + old) + floor;
    if (!(std::abs(r.got[i] - r.want[i]) <= tol)) {
      if (bad++ < 4) MESSAGE(what, ": element ", i, " got ", r.got[i], ", want ", r.want[i], " (tolerance ", tol, ")");
    }
  }
  return bad;
}

// The bound of the exact engines (Note [Fake engine numerics]): one rounding to the storage
// type, plus the accumulator's own error over the terms.
int check_exact(const Run& r, cudnnDataType_t t, const std::string& what) {
  const double acc = t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_DOUBLE ? unit(CUDNN_DATA_DOUBLE) : unit(CUDNN_DATA_FLOAT);
  const double floor = t == CUDNN_DATA_HALF ? std::ldexp(1.0, -24) : 1e-300;  // f16 subnormal spacing / 2, doubled
  return check(r, 2.0 * double(r.terms + 1) * acc, 1.0001 * unit(t), floor, what);
}

ConvProblem random_problem(std::mt19937_64& rng, ConvOp op, cudnnDataType_t t) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (;;) {
    ConvProblem p;
    p.op = op;
    p.dtype = t;
    p.groups = pick(0, 3) == 0 ? pick(2, 3) : 1;
    p.N = pick(1, 3), p.C = p.groups * pick(1, 4), p.O = p.groups * pick(1, 4);
    p.H = pick(1, 9), p.W = pick(1, 9), p.KH = pick(1, 3), p.KW = pick(1, 3);
    p.sh = pick(1, 3), p.sw = pick(1, 3), p.dh = pick(1, 2), p.dw = pick(1, 2);
    p.ph = pick(0, 2), p.pw = pick(0, 2);
    const int64_t post_h = pick(0, 2), post_w = pick(0, 2);  // asymmetric padding: only the output size sees it
    const int64_t sh = p.H + p.ph + post_h - p.dh * (p.KH - 1) - 1, sw = p.W + p.pw + post_w - p.dw * (p.KW - 1) - 1;
    if (sh < 0 || sw < 0) continue;
    p.HO = sh / p.sh + 1, p.WO = sw / p.sw + 1;
    p.flip = pick(0, 4) == 0;
    return p;
  }
}

constexpr cudnnDataType_t kTypes[] = {CUDNN_DATA_FLOAT, CUDNN_DATA_DOUBLE, CUDNN_DATA_BFLOAT16, CUDNN_DATA_HALF};
constexpr ConvOp kOps[] = {ConvOp::forward, ConvOp::backward_data, ConvOp::backward_filter};

}  // namespace

TEST_CASE("bf16, f16 and TF32 conversions round to nearest even (ties away for TF32), with subnormals and overflow") {
  using namespace rt::emu::cudnn;
  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(float_to_bf16(bits_float(0x3F808000u)) == 0x3F80);  // a tie: to even
  CHECK(float_to_bf16(bits_float(0x3F818000u)) == 0x3F82);  // a tie: to even (up)
  CHECK(float_to_bf16(bits_float(0x3F808001u)) == 0x3F81);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  CHECK(float_to_f16(1.0f) == 0x3C00);
  CHECK(float_to_f16(65504.0f) == 0x7BFF);
  CHECK(float_to_f16(65519.0f) == 0x7BFF);
  CHECK(float_to_f16(65520.0f) == 0x7C00);  // rounds up to inf
  CHECK(float_to_f16(std::ldexp(1.0f, -24)) == 0x0001);  // the least subnormal
  CHECK(float_to_f16(std::ldexp(1.0f, -25)) == 0x0000);  // a tie with zero: to even
  CHECK(float_to_f16(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 units: to even (2)
  CHECK(float_to_f16(std::ldexp(1.0f, -14)) == 0x0400);  // the least normal
  CHECK(float_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);                     // a tie: to even
  CHECK(float_to_f16(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);                     // a tie: to even (up)
  for (uint32_t h = 0; h < 0x7C00; ++h) CHECK_MESSAGE(float_to_f16(f16_to_float(uint16_t(h))) == h, h);  // round trip
  CHECK(f16_to_float(0x8001) == -std::ldexp(1.0f, -24));
  CHECK(round_tf32(1.0f + std::ldexp(1.0f, -11)) == 1.0f + std::ldexp(1.0f, -10));  // a tie: away from zero
  CHECK(round_tf32(1.0f + std::ldexp(1.0f, -12)) == 1.0f);
  CHECK(round_tf32(-1.0f - std::ldexp(1.0f, -11)) == -1.0f - std::ldexp(1.0f, -10));
}

TEST_CASE("the direct convolution matches the naive reference: 60 random geometries x 3 ops x 4 dtypes x 3 layouts") {
  std::mt19937_64 rng(2024);
  int cases = 0;
  for (int i = 0; i < 60; ++i)
    for (ConvOp op : kOps)
      for (cudnnDataType_t t : kTypes) {
        const ConvProblem p = random_problem(rng, op, t);
        for (const std::array<bool, 3>& layout :
             {std::array<bool, 3>{false, false, false}, {true, true, true}, {true, false, true}}) {
          const std::string what = p.str() + (layout[0] ? (layout[1] ? " NHWC" : " NHWC with an OIHW filter") : " NCHW");
          const Run r = run(p, Numerics{}, rng(), layout);
          CHECK_MESSAGE(check_exact(r, t, what) == 0, what);
          ++cases;
        }
      }
  CHECK(cases == 60 * 3 * 4 * 3);
}

TEST_CASE("named geometries: 1x1 stride 2, the stem, dilation, depthwise, batch 1, a ResNet 3x3") {
  struct G {
    int64_t N, C, H, W, O, K, s, pad, d, g;
  };
  const G gs[] = {{2, 4, 7, 7, 8, 1, 2, 0, 1, 1},  {1, 3, 11, 10, 4, 7, 2, 3, 1, 1}, {2, 4, 9, 8, 4, 3, 1, 2, 2, 1},
                  {1, 4, 6, 6, 4, 3, 1, 1, 1, 4},  {1, 5, 1, 1, 3, 1, 1, 0, 1, 1},  {2, 16, 8, 8, 16, 3, 1, 1, 1, 1},
                  {1, 6, 5, 7, 4, 3, 1, 1, 1, 2}};
  uint64_t seed = 77;
  for (const G& g : gs)
    for (ConvOp op : kOps)
      for (cudnnDataType_t t : kTypes)
        for (bool nhwc : {false, true}) {
          ConvProblem p;
          p.op = op, p.dtype = t, p.N = g.N, p.C = g.C, p.H = g.H, p.W = g.W, p.O = g.O, p.KH = p.KW = g.K;
          p.sh = p.sw = g.s, p.ph = p.pw = g.pad, p.dh = p.dw = g.d, p.groups = g.g;
          p.HO = (g.H + 2 * g.pad - g.d * (g.K - 1) - 1) / g.s + 1, p.WO = (g.W + 2 * g.pad - g.d * (g.K - 1) - 1) / g.s + 1;
          const Run r = run(p, Numerics{}, ++seed, {nhwc, nhwc, nhwc});
          CHECK_MESSAGE(check_exact(r, t, p.str()) == 0, p.str(), nhwc ? " NHWC" : " NCHW");
        }
}

TEST_CASE("alpha and beta: out = alpha * result + beta * out; beta == 0 never reads the (NaN) output") {
  std::mt19937_64 rng(5);
  for (ConvOp op : kOps)
    for (cudnnDataType_t t : kTypes) {
      const ConvProblem p = random_problem(rng, op, t);
      const Run r = run(p, Numerics{}, rng(), {false, false, false}, 0.5, 2.0);
      CHECK_MESSAGE(check_exact(r, t, p.str() + " alpha 0.5 beta 2") == 0, p.str());
      const Run z = run(p, Numerics{}, rng(), {true, true, true}, 1.5, 0.0);  // output bytes are NaN before
      for (double v : z.got) REQUIRE_MESSAGE(!std::isnan(v), p.str(), ": beta 0 read the output");
      CHECK(check_exact(z, t, p.str() + " alpha 1.5") == 0);
    }
}

TEST_CASE("engine numerics: TF32 and down-converted inputs, storage-type accumulation, split sums") {
  ConvProblem p;
  p.N = 2, p.C = 16, p.H = 9, p.W = 9, p.O = 8, p.KH = p.KW = 3, p.ph = p.pw = 1, p.HO = 9, p.WO = 9;
  std::mt19937_64 rng(11);
  for (ConvOp op : kOps) {
    p.op = op;
    // f32 on a tensor-core engine: inputs rounded to TF32 (10 bits): each product within
    // 2 * 2^-11 relative, and not the exact result.
    p.dtype = CUDNN_DATA_FLOAT;
    const uint64_t seed = rng();
    Numerics tf32;
    tf32.input = Numerics::Input::tf32;
    const Run exact = run(p, Numerics{}, seed, {false, false, false}), t32 = run(p, tf32, seed, {false, false, false});
    CHECK(check(t32, std::ldexp(1.0, -10) * 1.01, unit(CUDNN_DATA_FLOAT), 0, "tf32") == 0);
    CHECK_MESSAGE(t32.got != exact.got, "TF32 rounding changed nothing");
    Numerics down;
    down.input = Numerics::Input::down_convert;
    const Run dc = run(p, down, seed, {true, true, true});
    CHECK(check(dc, std::ldexp(1.0, -10) * 1.01, unit(CUDNN_DATA_FLOAT), 1e-7, "down-converted") == 0);
    CHECK(dc.got != exact.got);
    // Split sums (a non-deterministic engine): float partial sums, order by rotation.
    Numerics split;
    split.splits = 4;
    std::vector<std::vector<double>> outs;
    for (uint64_t rot = 0; rot < 4; ++rot) {
      split.rotation = rot;
      const Run s = run(p, split, seed, {false, false, false});
      CHECK(check(s, 2.0 * double(s.terms + 4) * unit(CUDNN_DATA_FLOAT), unit(CUDNN_DATA_FLOAT), 0, "split") == 0);
      outs.push_back(s.got);
    }
    if (op == ConvOp::backward_filter) {  // 162 terms per dw in 4 partials: the order shows in the bits
      bool differ = false;
      for (size_t i = 1; i < outs.size(); ++i) differ |= outs[i] != outs[0];
      CHECK_MESSAGE(differ, "four orders of the partial sums gave the same bits");
    }
    // bf16/f16 accumulated in the storage type: a rounding per addition.
    for (cudnnDataType_t t : {CUDNN_DATA_BFLOAT16, CUDNN_DATA_HALF}) {
      p.dtype = t;
      Numerics rpr;
      rpr.storage_accumulation = true;
      const uint64_t s2 = rng();
      const Run strict = run(p, Numerics{}, s2, {true, true, true}), reduced = run(p, rpr, s2, {true, true, true});
      CHECK(check_exact(strict, t, "strict") == 0);
      CHECK(check(reduced, double(reduced.terms + 1) * unit(t), unit(t), std::ldexp(1.0, -24), "reduced") == 0);
      int worse = 0;
      for (size_t i = 0; i < strict.got.size(); ++i)
        worse += std::abs(reduced.got[i] - reduced.want[i]) > std::abs(strict.got[i] - strict.want[i]);
      CHECK_MESSAGE(worse > int(strict.got.size()) / 4, "storage-type accumulation was not less accurate: ", worse);
    }
  }
}

#else
TEST_CASE("cuDNN fake convolution") { std::printf("SKIPPED: not built with --config=cuda-emu\n"); }
#endif
