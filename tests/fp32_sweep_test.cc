// fp32 against f64 at randomized shapes: one forward and one backward of every CPU kernel
// a ResNet runs (conv2d at every kernel size, stride and padding ResNets use and more,
// batch norm and its fused block tails, pooling, linear, cross-entropy), at shapes drawn
// from a seeded generator: odd and 1x1 spatial sizes, channel counts off the vector width
// and the GEMM tiles, batch 1, small and large GEMM dimensions, both memory layouts.
//
// Note [Sweep tolerances]
// Every input is drawn in f32 and widened, so the f32 and the f64 runs see the same numbers
// and the f64 run is the exact answer to ~1e-16. What differs is f32 rounding, bounded per
// element in terms of the magnitudes involved:
// - conv2d and linear are bilinear: an output element is a sum of products a*b, and its
//   rounding error is at most ~K*eps*sum|a*b| (K terms), typically a few eps times it.
//   sum|a*b| is the same op applied to |a| and |b| in f64, so each element is checked as
//   |y32 - y64| <= kBilinearTol * (|op|)(|a|, |b|).
// - the other ops are checked per tensor against the largest reference magnitude:
//   |v32 - v64| <= kNormTol * (max|v64| + floor), floor = the scale of terms that may cancel.
// Both are 3e-6 (25 f32 ulps). Measured over seeds 1-12 and the default, correct kernels
// reach at most 3.6e-7 (conv2d, GEMM), 7.4e-7 (batch norm) and 1e-6 (pooling, linear,
// cross-entropy): a margin of 3x or more. A dropped remainder channel or a tile summed
// twice is off by O(1) and fails by 10^4x; a batch-norm backward that accumulated its
// sums in f32 instead of f64 reaches 2.5e-6 (0.8 of the tolerance) at these sizes.
//
// The seed is fixed (reproducible in CI); RT_SWEEP_SEED=<n> draws another set of shapes and
// RT_SWEEP_CASES=<n> changes how many per op. Every failure prints the seed and the case.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "kernels/cpu/gemm.h"
#include "tests/test_util.h"

namespace rt {
namespace {

constexpr double kBilinearTol = 3e-6;  // Note [Sweep tolerances]
constexpr double kNormTol = 3e-6;

uint64_t sweep_seed() {
  const char* s = std::getenv("RT_SWEEP_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261201;
}
int sweep_cases(int dflt) {
  const char* s = std::getenv("RT_SWEEP_CASES");
  return s ? std::max(1, std::atoi(s)) : dflt;
}

// Shape draws: sizes that hit remainders of the vector width (8 f32 lanes, 16 with
// AVX-512) and of GEMM register tiles, plus the round sizes ResNets use.
struct Draw {
  std::mt19937_64 rng;
  explicit Draw(uint64_t seed) : rng(seed) {}
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
  bool coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  template <typename T>
  T pick(std::initializer_list<T> v) {
    return *(v.begin() + uniform(0, int64_t(v.size()) - 1));
  }
  // A channel count: small odd ones, ones just off 8/16/32 multiples, and ResNet widths.
  int64_t channels(int64_t max) {
    int64_t c;
    switch (uniform(0, 4)) {
      case 0: c = uniform(1, 9); break;
      case 1:
      case 2: c = pick<int64_t>({8, 16, 32, 64}) + uniform(-1, 7); break;
      case 3: c = uniform(10, 80); break;
      default: c = pick<int64_t>({64, 128, 256, 512, 96, 200}); break;
    }
    return std::clamp<int64_t>(c, 1, max);
  }
  int64_t spatial() {
    return coin(0.25) ? pick<int64_t>({1, 2, 3}) : uniform(4, 19);
  }
};

// Inputs drawn in f32 (so both precisions see the same values), widened to f64.
Tensor draw(const Shape& s, uint64_t seed, MemoryFormat f = MemoryFormat::contiguous) {
  return test::rnd(s, seed, DType::f32).to(DType::f64).to(f);
}

Tensor abs_of(const Tensor& t) {
  std::vector<double> v = t.contiguous().to_vector<double>();
  for (double& x : v) x = std::abs(x);
  return Tensor::from_vector(v, t.shape()).to(t.format());
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Output and the gradients of every input (for cotangent `cot`), in logical order, with
// the inputs converted to `dt` and (4-D ones) to `fmt`.
std::vector<std::vector<double>> run(const Fn& f, const std::vector<Tensor>& in64, const Tensor& cot64, DType dt,
                                     MemoryFormat fmt, const std::vector<bool>& grads) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < in64.size(); ++i) {
    Tensor t = in64[i].to(dt);
    if (t.ndim() == 4) t = t.to(fmt);
    if (grads[i]) t = test::leaf(t);
    in.push_back(t);
  }
  const Tensor y = f(in);
  std::vector<std::vector<double>> out{y.to_vector<double>()};
  if (cot64.defined()) {
    Tensor c = cot64.to(dt);
    if (c.ndim() == 4) c = c.to(y.format());
    y.backward(c);
  } else {
    y.backward();
  }
  for (size_t i = 0; i < in.size(); ++i)
    if (grads[i]) out.push_back(in[i].grad().to_vector<double>());
  return out;
}

// The largest error in units of the allowed error, over one tensor: > 1 fails.
struct Worst {
  double ratio = 0;
  size_t index = 0;
  double got = 0, want = 0;
};
// Elementwise against `bound` (bilinear ops), else against the tensor's largest reference
// value plus `floor`.
Worst worst(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>* bound,
            double floor = 0) {
  Worst w;
  double vmax = floor;
  for (double v : want) vmax = std::max(vmax, std::abs(v));
  for (size_t i = 0; i < got.size(); ++i) {
    const double allowed = bound ? kBilinearTol * (*bound)[i] + 1e-30 : kNormTol * vmax + 1e-30;
    const double r = std::abs(got[i] - want[i]) / allowed;
    if (!(r <= w.ratio)) w = {std::isnan(r) ? INFINITY : r, i, got[i], want[i]};
    if (std::isinf(w.ratio)) break;
  }
  return w;
}

// Checks one case: f in f32 against f64, both layouts. `bilinear`: the op is linear in
// each input (conv2d, linear), so its magnitude bound is the op on absolute values.
// `floor`: the scale of the terms a result is computed from, for results that may cancel
// to ~0 (cross-entropy's gradient p - onehot when p ~ 1).
void check_case(const std::string& what, const Fn& f, const std::vector<Tensor>& in64, const Tensor& cot64,
                const std::vector<bool>& grads, bool bilinear, double* worst_seen, double floor = 0) {
  for (MemoryFormat fmt : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    const auto want = run(f, in64, cot64, DType::f64, fmt, grads);
    const auto got = run(f, in64, cot64, DType::f32, fmt, grads);
    std::vector<std::vector<double>> bound;
    if (bilinear) {
      std::vector<Tensor> a;
      for (const Tensor& t : in64) a.push_back(abs_of(t));
      bound = run(f, a, cot64.defined() ? abs_of(cot64) : cot64, DType::f64, fmt, grads);
    }
    for (size_t k = 0; k < want.size(); ++k) {
      const Worst w = worst(got[k], want[k], bilinear ? &bound[k] : nullptr, floor);
      *worst_seen = std::max(*worst_seen, w.ratio);
      const std::string part = k == 0 ? "output" : "grad of input " + std::to_string(k - 1);
      CHECK_MESSAGE(w.ratio <= 1.0, detail::cat(what, " ", test::fmt_name(fmt), " ", part, ": f32 error ", w.ratio,
                                                "x the allowed at element ", w.index, " (f32 ", w.got, ", f64 ",
                                                w.want, "); seed ", sweep_seed(), " (RT_SWEEP_SEED)"));
    }
  }
}

TEST_CASE("fp32 sweep: conv2d forward, backward-data and backward-weight at random shapes") {
  Draw d(sweep_seed());
  double worst_seen = 0;
  const int cases = sweep_cases(150);
  for (int i = 0; i < cases; ++i) {
    // Kernel sizes, strides and paddings of ResNets (7x7/2 p3 stem, 3x3/1-2 p1, 1x1/1-2 p0),
    // plus off-pattern ones; dilation and groups now and then.
    const int64_t K = d.pick<int64_t>({1, 1, 3, 3, 3, 7, 2, 5});
    const int stride = int(d.pick<int64_t>({1, 1, 2}));
    const int pad = d.coin(0.8) ? int(K / 2) : int(d.uniform(0, K / 2));
    const int dil = d.coin(0.9) ? 1 : 2;
    const int64_t N = d.coin(0.3) ? 1 : d.uniform(2, 6);
    int64_t C = d.channels(K >= 5 ? 16 : 260), O = d.channels(260);
    int groups = 1;
    if (d.coin(0.1)) {
      groups = int(d.pick<int64_t>({2, 3}));
      C = std::max<int64_t>(1, C / groups) * groups;
      O = std::max<int64_t>(1, O / groups) * groups;
    }
    int64_t H = d.spatial(), W = d.coin(0.7) ? H : d.spatial();
    H = std::max<int64_t>(H, dil * (K - 1) + 1 - 2 * pad);
    W = std::max<int64_t>(W, dil * (K - 1) + 1 - 2 * pad);
    // Keep each case small enough for the suite: about 1M multiply-adds per pass.
    while (N * C * O * K * K * H * W / (int64_t(stride) * stride * groups) > (int64_t(1) << 20) && H > 1) {
      H = std::max<int64_t>(1, H * 3 / 4);
      W = std::max<int64_t>(1, W * 3 / 4);
      H = std::max<int64_t>(H, dil * (K - 1) + 1 - 2 * pad);
      W = std::max<int64_t>(W, dil * (K - 1) + 1 - 2 * pad);
      if (H == dil * (K - 1) + 1 - 2 * pad) break;
    }
    const bool bias = d.coin(0.3);
    const Conv2dParams p{stride, stride, pad, pad, dil, dil, groups};
    const uint64_t s = sweep_seed() * 1000 + uint64_t(i);
    const Tensor x = draw({N, C, H, W}, s + 1), w = draw({O, C / groups, K, K}, s + 2), b = draw({O}, s + 3);
    const int64_t HO = (H + 2 * pad - dil * (K - 1) - 1) / stride + 1, WO = (W + 2 * pad - dil * (K - 1) - 1) / stride + 1;
    const Tensor cot = draw({N, O, HO, WO}, s + 4);
    const std::string what = detail::cat("case ", i, ": conv2d x ", N, "x", C, "x", H, "x", W, " w ", O, "x", C / groups,
                                         "x", K, "x", K, " stride ", stride, " pad ", pad, " dil ", dil, " groups ",
                                         groups, bias ? " bias" : "");
    // The weight follows the input's layout (as modules do) and the other one too.
    for (bool w_nhwc : {false, true}) {
      const Fn f = [&](const std::vector<Tensor>& in) {
        const Tensor wt = to_format(in[1], w_nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous);
        return conv2d(in[0], wt, bias ? in[2] : Tensor(), p);
      };
      check_case(what + (w_nhwc ? " (w NHWC)" : " (w NCHW)"), f, {x, w, b}, cot, {true, true, bias}, true,
                 &worst_seen);
    }
  }
  MESSAGE("conv2d: ", cases, " cases, worst f32 error ", worst_seen, "x the allowed");
}


TEST_CASE("fp32 sweep: batch norm and the fused block tails (training mode) at random shapes") {
  Draw d(sweep_seed() + 1);
  double worst_seen = 0;
  const int cases = sweep_cases(40);
  for (int i = 0; i < cases; ++i) {
    const int64_t N = d.coin(0.2) ? 1 : d.uniform(2, 33), C = d.channels(300);
    int64_t H = d.spatial(), W = d.coin(0.7) ? H : d.spatial();
    // At least 8 values per channel: with M values the input gradient is
    // gamma/sigma * (dy - mean(dy) - xhat * mean(dy * xhat)), which cancels to exactly 0 at
    // M = 2 (xhat = +-1) and nearly so for a few more; a relative check of rounding noise
    // against rounding noise measures nothing there.
    while (N * H * W < 8) H += 2;
    while (N * C * H * W > (int64_t(1) << 18) && H * W > 1) {
      H = std::max<int64_t>(1, H / 2);
      W = std::max<int64_t>(1, W / 2);
    }
    const uint64_t s = sweep_seed() * 1000 + 500 + uint64_t(i);
    // An offset and a scale per case: batch norm subtracts the mean, which rounding must survive.
    const double shift = d.pick<double>({0.0, 0.5, 3.0}), scale = d.pick<double>({1.0, 0.1, 4.0});
    const Tensor x = add(mul(draw({N, C, H, W}, s + 1), scale), shift).to(DType::f32).to(DType::f64);
    const Tensor res = draw({N, C, H, W}, s + 2), w = draw({C}, s + 3), b = draw({C}, s + 4);
    const Tensor cot = draw({N, C, H, W}, s + 5);
    const int kind = int(i % 3);
    const std::string what = detail::cat("case ", i, ": ", kind == 0 ? "batch_norm" : kind == 1 ? "batch_norm_relu" : "batch_norm_add_relu",
                                         " x ", N, "x", C, "x", H, "x", W, " (x * ", scale, " + ", shift, ")");
    const Fn f = [&](const std::vector<Tensor>& in) {
      const Tensor rm = Tensor::zeros({C}, in[0].dtype()), rv = Tensor::full({C}, 1.0, in[0].dtype());
      if (kind == 0) return batch_norm(in[0], in[2], in[3], rm, rv, true);
      if (kind == 1) return batch_norm_relu(in[0], in[2], in[3], rm, rv, true);
      return batch_norm_add_relu(in[0], in[1], in[2], in[3], rm, rv, true);
    };
    check_case(what, f, {x, res, w, b}, cot, {true, kind == 2, true, true}, false, &worst_seen);
  }
  MESSAGE("batch norm: ", cases, " cases, worst f32 error ", worst_seen, "x the allowed");
}

TEST_CASE("fp32 sweep: pooling, linear and cross-entropy at random shapes") {
  Draw d(sweep_seed() + 2);
  double worst_seen = 0;
  const int cases = sweep_cases(30);
  for (int i = 0; i < cases; ++i) {
    const uint64_t s = sweep_seed() * 1000 + 800 + uint64_t(i);
    const int64_t N = d.coin(0.3) ? 1 : d.uniform(2, 40), C = d.channels(600);
    int64_t H = d.spatial(), W = d.coin(0.7) ? H : d.spatial();
    // Max pooling: the stem's 3x3/2 p1 and other windows (ties are measure-zero for random data).
    {
      const int k = int(d.pick<int64_t>({3, 3, 2})), st = int(d.pick<int64_t>({2, 1})), pd = int(d.uniform(0, k / 2));
      const int64_t Hp = std::max<int64_t>(H, k), Wp = std::max<int64_t>(W, k);
      const Pool2dParams p = Pool2dParams::make(k, st, pd);
      const Tensor x = draw({N, C, Hp, Wp}, s + 1);
      const int64_t HO = (Hp + 2 * pd - k) / st + 1, WO = (Wp + 2 * pd - k) / st + 1;
      check_case(detail::cat("case ", i, ": max_pool2d ", k, "/", st, " p", pd, " x ", N, "x", C, "x", Hp, "x", Wp),
                 [&](const std::vector<Tensor>& in) { return max_pool2d(in[0], p); }, {x},
                 draw({N, C, HO, WO}, s + 2), {true}, false, &worst_seen);
    }
    // Global and adaptive average pooling.
    {
      const Tensor x = draw({N, C, H, W}, s + 3);
      check_case(detail::cat("case ", i, ": global_avg_pool x ", N, "x", C, "x", H, "x", W),
                 [](const std::vector<Tensor>& in) { return global_avg_pool(in[0]); }, {x}, draw({N, C}, s + 4),
                 {true}, false, &worst_seen);
      const int oh = int(d.uniform(1, H)), ow = int(d.uniform(1, W));
      check_case(detail::cat("case ", i, ": adaptive_avg_pool2d ", oh, "x", ow, " x ", N, "x", C, "x", H, "x", W),
                 [&](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], oh, ow); }, {x},
                 draw({N, C, oh, ow}, s + 5), {true}, false, &worst_seen);
    }
    // Linear (the classifier: in = final width, out = classes) and cross-entropy on it.
    {
      const int64_t in_f = d.channels(2048) * d.pick<int64_t>({1, 1, 4}), out_f = d.coin(0.5) ? d.uniform(2, 20) : d.channels(1000);
      const bool bias = d.coin(0.7);
      const Tensor x = draw({N, in_f}, s + 6), w = draw({out_f, in_f}, s + 7), b = draw({out_f}, s + 8);
      check_case(detail::cat("case ", i, ": linear ", N, "x", in_f, " -> ", out_f, bias ? " bias" : ""),
                 [&](const std::vector<Tensor>& in) { return linear(in[0], in[1], bias ? in[2] : Tensor()); },
                 {x, w, b}, draw({N, out_f}, s + 9), {true, true, bias}, true, &worst_seen);
      std::vector<int64_t> labels(static_cast<size_t>(N));
      for (auto& l : labels) l = d.uniform(0, out_f - 1);
      const Tensor target = Tensor::from_vector(labels, {N});
      const double smoothing = d.pick<double>({0.0, 0.1});
      const Tensor logits = mul(draw({N, out_f}, s + 10), d.pick<double>({1.0, 10.0}));
      check_case(detail::cat("case ", i, ": cross_entropy ", N, "x", out_f, " smoothing ", smoothing),
                 [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target, smoothing); }, {logits},
                 Tensor(), {true}, false, &worst_seen, 1.0 / double(N));  // d/dlogit = (p - target) / N
    }
  }
  MESSAGE("pooling, linear, cross-entropy: ", cases, " cases, worst f32 error ", worst_seen, "x the allowed");
}

TEST_CASE("fp32 sweep: the GEMM kernel at random M, N, K, transposes and strides") {
  // conv2d and linear reach cpu::gemm through their own shapes; this draws the GEMM's
  // dimensions directly, tiny to large (register-tile remainders, K blocks of Eigen's
  // packing), with every transpose, padded leading dimensions and accumulation.
  Draw d(sweep_seed() + 3);
  double worst_seen = 0;
  const int cases = sweep_cases(60);
  auto dim = [&]() {
    switch (d.uniform(0, 3)) {
      case 0: return d.uniform(1, 17);
      case 1: return d.pick<int64_t>({8, 16, 24, 32, 48, 64}) + d.pick<int64_t>({-1, 0, 1});
      case 2: return d.uniform(18, 300);
      default: return d.uniform(300, 1200);
    }
  };
  for (int i = 0; i < cases; ++i) {
    int64_t M = dim(), N = dim(), K = dim();
    while (M * N * K > (int64_t(24) << 20)) (M >= N ? M : N) /= 2;
    const bool ta = d.coin(), tb = d.coin(), acc = d.coin(0.3);
    const int64_t lda = (ta ? M : K) + (d.coin(0.3) ? d.uniform(1, 5) : 0);
    const int64_t ldb = (tb ? K : N) + (d.coin(0.3) ? d.uniform(1, 5) : 0);
    const int64_t ldc = N + (d.coin(0.3) ? d.uniform(1, 5) : 0);
    const uint64_t s = sweep_seed() * 1000 + 900 + uint64_t(i);
    const std::vector<double> A = draw({(ta ? K : M) * lda}, s + 1).to_vector<double>();
    const std::vector<double> B = draw({(tb ? N : K) * ldb}, s + 2).to_vector<double>();
    const std::vector<double> C0 = draw({M * ldc}, s + 3).to_vector<double>();
    auto a = [&](int64_t r, int64_t k) { return ta ? A[size_t(k * lda + r)] : A[size_t(r * lda + k)]; };
    auto b = [&](int64_t k, int64_t c) { return tb ? B[size_t(c * ldb + k)] : B[size_t(k * ldb + c)]; };
    // The f64 reference and the magnitude bound, straight from the definition.
    std::vector<double> want(size_t(M * N)), bound(size_t(M * N));
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) {
        double v = acc ? C0[size_t(r * ldc + c)] : 0.0, m = std::abs(v);
        for (int64_t k = 0; k < K; ++k) {
          v += a(r, k) * b(k, c);
          m += std::abs(a(r, k) * b(k, c));
        }
        want[size_t(r * N + c)] = v;
        bound[size_t(r * N + c)] = m;
      }
    const std::vector<float> Af(A.begin(), A.end()), Bf(B.begin(), B.end());
    std::vector<float> Cf(C0.begin(), C0.end());
    cpu::gemm<float>(ta, tb, M, N, K, Af.data(), lda, Bf.data(), ldb, acc, Cf.data(), ldc);
    std::vector<double> got(size_t(M * N));
    bool pad_ok = true;  // the padding columns of C are never written
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t c = 0; c < N; ++c) got[size_t(r * N + c)] = Cf[size_t(r * ldc + c)];
      for (int64_t c = N; c < ldc; ++c) pad_ok &= Cf[size_t(r * ldc + c)] == float(C0[size_t(r * ldc + c)]);
    }
    const Worst w = worst(got, want, &bound);
    worst_seen = std::max(worst_seen, w.ratio);
    const std::string what = detail::cat("case ", i, ": gemm M ", M, " N ", N, " K ", K, ta ? " A^T" : "", tb ? " B^T" : "",
                                         " lda ", lda, " ldb ", ldb, " ldc ", ldc, acc ? " accumulate" : "");
    CHECK_MESSAGE(w.ratio <= 1.0, what, ": f32 error ", w.ratio, "x the allowed at element ", w.index, " (f32 ", w.got,
                  ", f64 ", w.want, "); seed ", sweep_seed(), " (RT_SWEEP_SEED)");
    CHECK_MESSAGE(pad_ok, what, ": wrote into C's padding columns");
  }
  MESSAGE("gemm: ", cases, " cases, worst f32 error ", worst_seen, "x the allowed");
}

}  // namespace
}  // namespace rt
