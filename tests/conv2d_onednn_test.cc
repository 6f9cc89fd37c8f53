// oneDNN's f32 convolutions (kernels/cpu/conv2d_onednn.h) against the im2col + GEMM
// reference run in f64: forward, data, weight and bias gradients, over a seeded random
// sweep of geometries (odd and 1x1 spatial sizes, channel counts off the vector width,
// groups, strides, padding, dilation, batch 1, both activation and both weight layouts,
// with and without bias) and ResNet-50's own shapes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv2d_onednn.h"

namespace rt::cpu {
namespace {

// f32 against f64: each output sums K = Cg*KH*KW products (up to 2304 here) rounded to f32
// along the way; oneDNN's blocked sums stay within ~sqrt(K) * 2^-24 of the largest output
// (~3e-6 at K = 2304; the sweep's worst measured is 4.2e-7). 1e-5 of the tensor's largest
// value leaves a margin of ~3x at the largest K.
constexpr double kTolOfLargest = 1e-5;

struct Sizes {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, groups;
  bool nhwc, ohwi, bias;
};

Conv2dGeom geom_of(const Sizes& s) {
  Conv2dGeom g{};
  g.N = s.N, g.C = s.C, g.H = s.H, g.W = s.W, g.O = s.O, g.KH = s.KH, g.KW = s.KW;
  g.sh = s.sh, g.sw = s.sw, g.ph = s.ph, g.pw = s.pw, g.dh = s.dh, g.dw = s.dw, g.groups = s.groups;
  g.HO = (s.H + 2 * s.ph - s.dh * (s.KH - 1) - 1) / s.sh + 1;
  g.WO = (s.W + 2 * s.pw - s.dw * (s.KW - 1) - 1) / s.sw + 1;
  g.nhwc = s.nhwc;
  g.weight_ohwi = s.ohwi;
  return g;
}

std::string describe(const Sizes& s) {
  char b[256];
  std::snprintf(b, sizeof b, "x %ldx%ldx%ldx%ld -> %ld, kernel %ldx%ld, stride %ld,%ld, pad %ld,%ld, dil %ld,%ld, groups %ld, %s, "
                "weight %s%s",
                long(s.N), long(s.C), long(s.H), long(s.W), long(s.O), long(s.KH), long(s.KW), long(s.sh), long(s.sw),
                long(s.ph), long(s.pw), long(s.dh), long(s.dw), long(s.groups), s.nhwc ? "NHWC" : "NCHW",
                s.ohwi ? "OHWI" : "OIHW", s.bias ? ", bias" : "");
  return b;
}

double g_worst = 0;  // the largest rel_err seen, reported by the sweep

// max |a - ref| / max |ref| (ref's scale at least 1e-30).
double rel_err(const std::vector<float>& a, const std::vector<double>& ref) {
  double e = 0, m = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    e = std::max(e, std::abs(double(a[i]) - ref[i]));  // NaN (never written) fails below
    if (std::isnan(double(a[i]))) return INFINITY;
    m = std::max(m, std::abs(ref[i]));
  }
  g_worst = std::max(g_worst, e / m);
  return e / m;
}

std::vector<float> to_f32(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// The values are f32-representable, so both sides start from the same numbers.
std::vector<double> random_values(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = double(float(u(rng)));
  return v;
}

void check(const Sizes& s, std::mt19937_64& rng) {
  CAPTURE(describe(s));
  const Conv2dGeom g = geom_of(s);
  REQUIRE(g.HO > 0);
  REQUIRE(g.WO > 0);
  const size_t nx = size_t(g.N * g.C * g.H * g.W), nw = size_t(g.O * (g.C / g.groups) * g.KH * g.KW),
               ny = size_t(g.N * g.O * g.HO * g.WO);
  const std::vector<double> x = random_values(nx, rng), w = random_values(nw, rng), b = random_values(size_t(g.O), rng),
                            dy = random_values(ny, rng);
  std::vector<double> y64(ny), dx64(nx), dw64(nw), db64(size_t(g.O));
  im2col_conv2d_forward<double>(g, x.data(), w.data(), s.bias ? b.data() : nullptr, y64.data());
  im2col_conv2d_backward<double>(g, x.data(), w.data(), dy.data(), dx64.data(), dw64.data(), s.bias ? db64.data() : nullptr);

  const std::vector<float> xf = to_f32(x), wf = to_f32(w), bf = to_f32(b), dyf = to_f32(dy);
  std::vector<float> y(ny, NAN), dx(nx, NAN), dw(nw, NAN), db(size_t(g.O), NAN);
  REQUIRE(onednn_conv2d_forward(g, xf.data(), wf.data(), s.bias ? bf.data() : nullptr, y.data()));
  REQUIRE(onednn_conv2d_backward(g, xf.data(), wf.data(), dyf.data(), dx.data(), dw.data(),
                                 s.bias ? db.data() : nullptr));
  CHECK(rel_err(y, y64) <= kTolOfLargest);
  CHECK(rel_err(dx, dx64) <= kTolOfLargest);
  CHECK(rel_err(dw, dw64) <= kTolOfLargest);
  if (s.bias) CHECK(rel_err(db, db64) <= kTolOfLargest);

  // Each gradient alone (the others null) gives the same values: a layer whose input needs
  // no gradient (the stem) asks only for dw.
  std::vector<float> dw_only(nw, NAN), dx_only(nx, NAN);
  REQUIRE(onednn_conv2d_backward(g, xf.data(), wf.data(), dyf.data(), nullptr, dw_only.data(), nullptr));
  REQUIRE(onednn_conv2d_backward(g, xf.data(), wf.data(), dyf.data(), dx_only.data(), nullptr, nullptr));
  CHECK(dw_only == dw);
  CHECK(dx_only == dx);
  if (s.bias) {  // a frozen weight with a trained bias: x was not kept
    std::vector<float> db_only(size_t(g.O), NAN);
    REQUIRE(onednn_conv2d_backward(g, nullptr, wf.data(), dyf.data(), nullptr, nullptr, db_only.data()));
    CHECK(rel_err(db_only, db64) <= kTolOfLargest);
  }
}

TEST_CASE("oneDNN convolutions match the f64 reference over a random sweep of geometries") {
  std::mt19937_64 rng(20261201);
  auto pick = [&rng](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int checked = 0;
  while (checked < 80) {
    Sizes s{};
    s.groups = pick(0, 2) == 0 ? pick(2, 4) : 1;
    s.N = pick(0, 2) == 0 ? 1 : pick(2, 3);
    s.C = s.groups * pick(1, 19);
    s.O = s.groups * pick(1, 19);
    s.H = pick(1, 13);
    s.W = pick(0, 3) == 0 ? s.H : pick(1, 13);
    const int64_t k = std::vector<int64_t>{1, 1, 3, 3, 2, 5}[size_t(pick(0, 5))];
    s.KH = k;
    s.KW = pick(0, 4) == 0 ? std::vector<int64_t>{1, 3}[size_t(pick(0, 1))] : k;
    s.sh = pick(1, 3);
    s.sw = pick(0, 2) == 0 ? pick(1, 3) : s.sh;
    s.ph = pick(0, 2);
    s.pw = pick(0, 2);
    s.dh = pick(0, 3) == 0 ? 2 : 1;
    s.dw = pick(0, 3) == 0 ? 2 : 1;
    s.nhwc = pick(0, 1) == 1;
    s.ohwi = pick(0, 1) == 1;
    s.bias = pick(0, 2) == 0;
    // Padding at most half the (dilated) kernel, as every framework requires, and a kernel
    // that fits the padded input.
    s.ph = std::min(s.ph, (s.dh * (s.KH - 1) + 1) / 2);
    s.pw = std::min(s.pw, (s.dw * (s.KW - 1) + 1) / 2);
    if (s.H + 2 * s.ph < s.dh * (s.KH - 1) + 1 || s.W + 2 * s.pw < s.dw * (s.KW - 1) + 1) continue;
    check(s, rng);
    ++checked;
  }
  MESSAGE("worst error over the sweep: ", g_worst, " of the largest value (tolerance ", kTolOfLargest, ")");
}

TEST_CASE("oneDNN convolutions match the f64 reference at ResNet-50's shapes (batch 2, 56 px stage 1)") {
  std::mt19937_64 rng(50);
  for (const bool nhwc : {true, false}) {
    const Sizes shapes[] = {
        {2, 3, 64, 64, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1, nhwc, nhwc, false},      // stem (narrowed)
        {2, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, nhwc, nhwc, false},     // 3x3
        {2, 64, 14, 14, 256, 1, 1, 1, 1, 0, 0, 1, 1, 1, nhwc, nhwc, false},    // 1x1 expand
        {2, 256, 14, 14, 128, 1, 1, 2, 2, 0, 0, 1, 1, 1, nhwc, nhwc, false},   // strided 1x1 downsample
        {2, 128, 15, 15, 128, 3, 3, 2, 2, 1, 1, 1, 1, 1, nhwc, nhwc, false},   // strided 3x3, odd size
        {2, 256, 7, 7, 256, 3, 3, 1, 1, 1, 1, 1, 1, 32, nhwc, nhwc, false},    // ResNeXt's 32 groups
        {2, 256, 1, 1, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1, nhwc, nhwc, true},       // SE's fc1 on 1x1
    };
    for (const Sizes& s : shapes) check(s, rng);
  }
}

TEST_CASE("conv2d_forward follows the algorithm setting; oneDNN names the kernel it chose") {
  const Sizes s{2, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, true, true, false};
  const Conv2dGeom g = geom_of(s);
  std::mt19937_64 rng(7);
  const std::vector<float> x = to_f32(random_values(size_t(g.N * g.C * g.H * g.W), rng)),
                           w = to_f32(random_values(size_t(g.O * g.C * 9), rng));
  const size_t ny = size_t(g.N * g.O * g.HO * g.WO);
  std::vector<float> a(ny), b(ny), ref(ny);
  REQUIRE(conv_algo() == ConvAlgo::onednn);  // the default
  conv2d_forward<float>(g, x.data(), w.data(), nullptr, a.data());
  onednn_conv2d_forward(g, x.data(), w.data(), nullptr, b.data());
  CHECK(a == b);
  set_conv_algo(ConvAlgo::im2col);
  conv2d_forward<float>(g, x.data(), w.data(), nullptr, a.data());
  im2col_conv2d_forward<float>(g, x.data(), w.data(), nullptr, ref.data());
  set_conv_algo(ConvAlgo::onednn);
  CHECK(a == ref);
  const std::string impl = onednn_conv2d_impl(g);
  MESSAGE("oneDNN's kernel for an NHWC 3x3 convolution here: ", impl);
  CHECK(!impl.empty());
  CHECK(impl.find("ref") == std::string::npos);  // a real kernel, not oneDNN's reference loops
}

}  // namespace
}  // namespace rt::cpu
