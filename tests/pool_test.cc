// Pooling: max_pool2d against a naive window scan (padding is -inf, PyTorch's output size
// with ceil_mode, dilation), NaN propagation, adaptive_avg_pool2d against its window
// definition, global_avg_pool; gradients by gradcheck in f64.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::fmt_name;

// ---- max_pool2d --------------------------------------------------------------------

// PyTorch's output size, counted window by window instead of by formula: in floor mode a
// window must fit inside the padded input; in ceil mode it may run past the right padding
// (up to a stride's worth) but must start inside the input or its left padding.
int64_t count_windows(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t padded = in + 2 * p, extent = d * (k - 1) + 1;
  int64_t n = 0;
  for (int64_t i = 0;; ++i) {
    const int64_t start = i * s;  // in padded coordinates
    const bool ok = ceil_mode ? (start + extent < padded + s && start < in + p) : (start + extent <= padded);
    if (!ok) break;
    ++n;
  }
  return n;
}

// Window max; positions outside the input are skipped (= -inf); any NaN wins.
std::vector<double> maxpool_reference(const std::vector<double>& x, const Shape& s, const Pool2dParams& p, int64_t HO,
                                      int64_t WO) {
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  std::vector<double> y(size_t(N * C * HO * WO));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HO; ++i)
        for (int64_t j = 0; j < WO; ++j) {
          double best = -std::numeric_limits<double>::infinity();
          bool nan = false;
          for (int64_t kh = 0; kh < p.kernel_h; ++kh)
            for (int64_t kw = 0; kw < p.kernel_w; ++kw) {
              const int64_t ih = i * p.stride_h - p.pad_h + kh * p.dilation_h;
              const int64_t iw = j * p.stride_w - p.pad_w + kw * p.dilation_w;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const double v = x[size_t(((n * C + c) * H + ih) * W + iw)];
              if (std::isnan(v)) nan = true;
              best = std::max(best, v);
            }
          y[size_t(((n * C + c) * HO + i) * WO + j)] = nan ? std::numeric_limits<double>::quiet_NaN() : best;
        }
  return y;
}

std::vector<double> adaptive_reference(const std::vector<double>& x, const Shape& s, int64_t OH, int64_t OW);

// Distinct values (a scaled random permutation): no ties, so the argmax is unique and
// finite differences of size 1e-6 never change it.
Tensor distinct(const Shape& s, uint64_t seed, MemoryFormat f = MemoryFormat::contiguous, double offset = 0.0) {
  const int64_t n = shape_numel(s);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(i);
  Generator g(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[size_t(i)], v[size_t(g.randint(0, i + 1))]);
  for (double& e : v) e = (e - double(n) / 2) * 0.01 + offset;
  return Tensor::from_vector(v, s).to(f);
}

struct PoolCase {
  Shape x;
  Pool2dParams p;
  int64_t HO, WO;  // worked out by hand (and checked against count_windows)
};

const std::vector<PoolCase> kPoolCases = {
    {{2, 3, 9, 8}, Pool2dParams::make(3, 2, 1), 5, 4},                 // ResNet stem k3 s2 p1
    {{1, 2, 16, 16}, Pool2dParams::make(3, 2, 1), 8, 8},               // stem on an even size
    {{2, 2, 7, 5}, Pool2dParams::make(2, 2, 0), 3, 2},                 // floor drops the last row/col
    {{2, 2, 7, 5}, Pool2dParams::make(2, 2, 0, 1, true), 4, 3},        // ceil keeps a partial window
    {{1, 2, 4, 4}, Pool2dParams::make(2, 3, 1, 1, true), 2, 2},        // ceil: 3rd window would start in right pad
    {{1, 1, 5, 5}, Pool2dParams::make(2, 2, 1, 1, true), 3, 3},        // ceil: ditto, pad 1
    {{2, 2, 7, 6}, Pool2dParams::make(3, 1, 1, 2), 5, 4},              // dilation 2
    {{1, 3, 8, 9}, Pool2dParams::make(3, 3, 1, 2, true), 3, 3},        // dilation + ceil
    {{2, 2, 5, 6}, {2, 3, 1, 2, 1, 1, 1, 2, false}, 6, 2},             // asymmetric everything
    {{2, 2, 5, 6}, {3, 2, 2, 1, 1, 0, 1, 1, true}, 3, 5},              // asymmetric, ceil
    {{2, 3, 4, 5}, Pool2dParams::make(1, 1, 0), 4, 5},                 // identity
    {{1, 2, 3, 3}, Pool2dParams::make(3, 1, 0), 1, 1},                 // window = whole image
};

TEST_CASE("max_pool2d output size follows PyTorch, ceil_mode included") {
  for (size_t ci = 0; ci < kPoolCases.size(); ++ci) {
    const PoolCase& k = kPoolCases[ci];
    CAPTURE(ci);
    REQUIRE(count_windows(k.x[2], k.p.kernel_h, k.p.stride_h, k.p.pad_h, k.p.dilation_h, k.p.ceil_mode) == k.HO);
    REQUIRE(count_windows(k.x[3], k.p.kernel_w, k.p.stride_w, k.p.pad_w, k.p.dilation_w, k.p.ceil_mode) == k.WO);
    const Tensor y = max_pool2d(test::rnd(k.x, ci), k.p);
    CHECK(y.shape() == Shape{k.x[0], k.x[1], k.HO, k.WO});
  }
  // 112 -> 56: ResNet-50's stem after the 7x7/2 conv.
  CHECK(max_pool2d(Tensor::zeros({1, 1, 112, 112}), Pool2dParams::make(3, 2, 1)).shape() == Shape{1, 1, 56, 56});
}

TEST_CASE("max_pool2d forward matches the window scan in every layout") {
  for (size_t ci = 0; ci < kPoolCases.size(); ++ci) {
    const PoolCase& k = kPoolCases[ci];
    // All negative: a padded position that counted as 0 instead of -inf would show.
    const Tensor x = add(test::rnd(k.x, 10 + ci), -10.0);
    for (DType dt : {DType::f64, DType::f32}) {
      const std::vector<double> want = maxpool_reference(x.to(dt).to_vector<double>(), k.x, k.p, k.HO, k.WO);
      for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
        const Tensor y = max_pool2d(x.to(dt).to(f), k.p);
        CHECK(y.format() == f);
        CHECK(y.dtype() == dt);
        // A max selects one input: exact in any dtype.
        test::check_close(y, want, test::Tol{0, 0}, detail::cat("case ", ci, " ", dtype_name(dt), " ", fmt_name(f)));
      }
    }
  }
}

TEST_CASE("max_pool2d and adaptive_avg_pool2d on inputs large enough for the multi-threaded paths") {
  const Shape s{4, 8, 32, 30};
  const Tensor x = test::rnd(s, 5);
  const std::vector<double> xv = x.to_vector<double>();
  const Pool2dParams p = Pool2dParams::make(3, 2, 1);
  const std::vector<double> want_max = maxpool_reference(xv, s, p, 16, 15);
  const std::vector<double> want_avg = adaptive_reference(xv, s, 5, 3);
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    const Tensor xl = test::leaf(x.to(f));
    const Tensor y = max_pool2d(xl, p);
    test::check_close(y, want_max, test::Tol{0, 0}, detail::cat("max ", fmt_name(f)));
    test::check_close(adaptive_avg_pool2d(x.to(f), 5, 3), want_avg, test::kTolF64, detail::cat("avg ", fmt_name(f)));
    // d sum(y) / dx counts how many windows pick each input; the counts add up to the outputs.
    sum(y).backward();
    double total = 0;
    for (double g : xl.grad().to_vector<double>()) total += g;
    CHECK(total == double(y.numel()));
  }
}

TEST_CASE("max_pool2d propagates NaN like PyTorch") {
  const Shape s{1, 2, 6, 7};
  const Pool2dParams p = Pool2dParams::make(3, 2, 1);
  std::vector<double> xv = test::rnd(s, 3).to_vector<double>();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  xv[size_t((0 * 6 + 3) * 7 + 3)] = nan;      // channel 0, (3, 3): inside four windows
  xv[size_t((1 * 6 + 5) * 7 + 6)] = nan;      // channel 1, bottom-right corner
  const Tensor x = Tensor::from_vector(xv, s);
  const std::vector<double> want = maxpool_reference(xv, s, p, 3, 4);
  int nans = 0;
  for (double v : want) nans += std::isnan(v);
  REQUIRE(nans == 5);  // 4 windows hold (3, 3), 1 holds (5, 6)
  for (DType dt : {DType::f64, DType::f32})
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(fmt_name(f));
      const Tensor xl = test::leaf(x.to(dt).to(f));
      const Tensor y = max_pool2d(xl, p);
      const std::vector<double> got = y.to_vector<double>();
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(std::isnan(got[i]) == std::isnan(want[i]));
        if (!std::isnan(want[i])) CHECK(got[i] == (dt == DType::f32 ? double(float(want[i])) : want[i]));
      }
      // The gradient goes to the NaN (it is the window's argmax): 4 windows at (3, 3).
      sum(y).backward();
      const std::vector<double> g = xl.grad().to_vector<double>();
      CHECK(g[size_t((0 * 6 + 3) * 7 + 3)] == 4.0);
      CHECK(g[size_t((1 * 6 + 5) * 7 + 6)] == 1.0);
    }
}

TEST_CASE("max_pool2d gradients pass gradcheck in every layout") {
  for (size_t ci = 0; ci < kPoolCases.size(); ++ci) {
    const PoolCase& k = kPoolCases[ci];
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      const Tensor x = test::leaf(distinct(k.x, 20 + ci, f, /*offset=*/-3.0));
      test::check_gradcheck([&](const std::vector<Tensor>& in) { return max_pool2d(in[0], k.p); }, {x},
                            detail::cat("case ", ci, " ", fmt_name(f)));
      CHECK(x.grad().format() == f);
    }
  }
}

TEST_CASE("max_pool2d gradient lands on the argmax, summed over overlapping windows") {
  // 1x1x3x3 with k2 s1: four windows; the centre (the max) is in all of them.
  const Tensor x = test::leaf(Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 9, 5, 6, 7, 8}, {1, 1, 3, 3}));
  const Tensor y = max_pool2d(x, Pool2dParams::make(2, 1, 0));
  test::check_close(y, {9, 9, 9, 9}, test::kTolF64, "values");
  sum(y).backward();
  test::check_close(x.grad(), {0, 0, 0, 0, 4, 0, 0, 0, 0}, test::kTolF64, "gradient");
}

// ---- adaptive_avg_pool2d -----------------------------------------------------------

// Cell (i, j) averages rows [floor(i*H/OH), ceil((i+1)*H/OH)), likewise columns.
std::vector<double> adaptive_reference(const std::vector<double>& x, const Shape& s, int64_t OH, int64_t OW) {
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  std::vector<double> y(size_t(N * C * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          const auto h0 = int64_t(std::floor(double(i) * H / OH)), h1 = int64_t(std::ceil(double(i + 1) * H / OH));
          const auto w0 = int64_t(std::floor(double(j) * W / OW)), w1 = int64_t(std::ceil(double(j + 1) * W / OW));
          double sum = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) sum += x[size_t(((n * C + c) * H + h) * W + w)];
          y[size_t(((n * C + c) * OH + i) * OW + j)] = sum / double((h1 - h0) * (w1 - w0));
        }
  return y;
}

struct AdaptiveCase {
  Shape x;
  int OH, OW;
};
const std::vector<AdaptiveCase> kAdaptiveCases = {
    {{2, 3, 7, 5}, 3, 2},   // uneven, overlapping windows
    {{1, 2, 8, 8}, 4, 4},   // even split
    {{2, 2, 6, 6}, 1, 1},   // global
    {{2, 3, 3, 2}, 5, 4},   // output larger than input: windows repeat inputs
    {{1, 2, 7, 7}, 7, 7},   // identity
    {{2, 2, 5, 9}, 2, 4},
    {{1, 1, 1, 1}, 3, 2},   // one pixel everywhere
};

TEST_CASE("adaptive_avg_pool2d matches its window definition in every layout") {
  for (size_t ci = 0; ci < kAdaptiveCases.size(); ++ci) {
    const AdaptiveCase& k = kAdaptiveCases[ci];
    const Tensor x = test::rnd(k.x, 40 + ci);
    for (DType dt : {DType::f64, DType::f32}) {
      const std::vector<double> want = adaptive_reference(x.to(dt).to_vector<double>(), k.x, k.OH, k.OW);
      for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
        const Tensor y = adaptive_avg_pool2d(x.to(dt).to(f), k.OH, k.OW);
        CHECK(y.format() == f);
        CHECK(y.shape() == Shape{k.x[0], k.x[1], k.OH, k.OW});
        test::check_close(y, want, test::tol_for(dt), detail::cat("case ", ci, " ", dtype_name(dt), " ", fmt_name(f)));
      }
    }
  }
}

TEST_CASE("adaptive_avg_pool2d windows by hand: 7 -> 3 rows overlap, 2 -> 3 repeats") {
  // Rows 0..6 hold 0..6: windows [0,3), [2,5), [4,7) -> means 1, 3, 5.
  std::vector<double> v(7);
  for (int i = 0; i < 7; ++i) v[size_t(i)] = i;
  test::check_close(adaptive_avg_pool2d(Tensor::from_vector(v, {1, 1, 7, 1}), 3, 1), {1, 3, 5}, test::kTolF64, "7->3");
  // Columns {10, 20} -> 3 cells: [0,1), [0,2), [1,2) -> 10, 15, 20.
  test::check_close(adaptive_avg_pool2d(Tensor::from_vector(std::vector<double>{10, 20}, {1, 1, 1, 2}), 1, 3),
                    {10, 15, 20}, test::kTolF64, "2->3");
}

TEST_CASE("adaptive_avg_pool2d gradients pass gradcheck in every layout") {
  for (size_t ci = 0; ci < kAdaptiveCases.size(); ++ci) {
    const AdaptiveCase& k = kAdaptiveCases[ci];
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      const Tensor x = test::leaf(test::rnd(k.x, 50 + ci, DType::f64, f));
      test::check_gradcheck([&](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], k.OH, k.OW); },
                            {x}, detail::cat("case ", ci, " ", fmt_name(f)));
      CHECK(x.grad().format() == f);
    }
  }
}

// ---- global_avg_pool ---------------------------------------------------------------

TEST_CASE("global_avg_pool returns (N, C) means in both layouts") {
  const Shape s{3, 4, 5, 7};
  const Tensor x = test::rnd(s, 60);
  const std::vector<double> xv = x.to_vector<double>();
  std::vector<double> want(size_t(3 * 4));
  for (int64_t nc = 0; nc < 12; ++nc) {
    double sum = 0;
    for (int64_t i = 0; i < 35; ++i) sum += xv[size_t(nc * 35 + i)];
    want[size_t(nc)] = sum / 35;
  }
  for (DType dt : {DType::f64, DType::f32})
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      const Tensor y = global_avg_pool(x.to(dt).to(f));
      CHECK(y.shape() == Shape{3, 4});
      CHECK(y.format() == MemoryFormat::contiguous);
      test::check_close(y, want, test::tol_for(dt), detail::cat(dtype_name(dt), " ", fmt_name(f)));
    }
}

TEST_CASE("global_avg_pool gradients pass gradcheck in both layouts") {
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    const Tensor x = test::leaf(test::rnd({2, 3, 4, 5}, 70, DType::f64, f));
    test::check_gradcheck([](const std::vector<Tensor>& in) { return global_avg_pool(in[0]); }, {x}, fmt_name(f));
    CHECK(x.grad().format() == f);
  }
}

TEST_CASE("pooling backward converts an incoming gradient of the other format") {
  // add(c, pool(x)) takes c's format: the pool's backward gets its gradient in c's format.
  for (MemoryFormat fx : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    const MemoryFormat fc =
        fx == MemoryFormat::contiguous ? MemoryFormat::channels_last : MemoryFormat::contiguous;
    const Tensor x = test::leaf(distinct({2, 3, 7, 6}, 80, fx));
    const Tensor c1 = test::leaf(test::rnd({2, 3, 4, 3}, 81, DType::f64, fc));
    test::check_gradcheck(
        [](const std::vector<Tensor>& in) { return add(in[1], max_pool2d(in[0], Pool2dParams::make(3, 2, 1))); },
        {x, c1}, detail::cat("max_pool2d x ", fmt_name(fx)));
    const Tensor c2 = test::leaf(test::rnd({2, 3, 3, 2}, 82, DType::f64, fc));
    test::check_gradcheck([](const std::vector<Tensor>& in) { return add(in[1], adaptive_avg_pool2d(in[0], 3, 2)); },
                          {x, c2}, detail::cat("adaptive_avg_pool2d x ", fmt_name(fx)));
  }
}

// ---- errors ------------------------------------------------------------------------

TEST_CASE("pooling rejects bad arguments with clear messages") {
  const Tensor x = test::rnd({1, 2, 6, 6}, 1);
  CHECK_THROWS_WITH_AS(max_pool2d(x, Pool2dParams::make(3, 2, 2)), doctest::Contains("half the kernel size"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, Pool2dParams::make(2, 2, 2)), doctest::Contains("half the kernel size"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {3, 3, 1, 1, 1, 2, 1, 1, false}), doctest::Contains("half the kernel size"),
                       Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {3, 3, 1, 1, -1, 0, 1, 1, false}), doctest::Contains("half the kernel size"),
                       Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, Pool2dParams::make(2, 0, 0)), doctest::Contains("must be positive"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, Pool2dParams::make(0, 1, 0)), doctest::Contains("must be positive"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, Pool2dParams::make(3, 1, 1, 0)), doctest::Contains("must be positive"), Error);
  // Output < 1: the kernel is larger than the padded input.
  CHECK_THROWS_WITH_AS(max_pool2d(test::rnd({1, 1, 2, 2}, 2), Pool2dParams::make(3, 1, 0)),
                       doctest::Contains("too small"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(test::rnd({1, 1, 5, 5}, 2), Pool2dParams::make(3, 1, 0, 3)),
                       doctest::Contains("too small"), Error);
  // Same with a stride larger than the shortfall: PyTorch's division rounds toward -inf
  // ((2 - 3) / 2 -> -1, output 0); truncating toward zero would give an output of 1.
  CHECK_THROWS_WITH_AS(max_pool2d(test::rnd({1, 1, 2, 2}, 2), Pool2dParams::make(3, 2, 0)),
                       doctest::Contains("too small"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(test::rnd({1, 1, 1, 1}, 2), Pool2dParams::make(3, 2, 0, 1, true)),
                       doctest::Contains("too small"), Error);
  CHECK_THROWS_AS(max_pool2d(test::rnd({2, 6, 6}, 3), Pool2dParams::make(2, 2, 0)), Error);
  CHECK_THROWS_AS(max_pool2d(Tensor::zeros({1, 1, 4, 4}, DType::i64), Pool2dParams::make(2, 2, 0)), Error);

  CHECK_THROWS_WITH_AS(adaptive_avg_pool2d(x, 0, 2), doctest::Contains("output size must be positive"), Error);
  CHECK_THROWS_WITH_AS(adaptive_avg_pool2d(x, 2, -1), doctest::Contains("output size must be positive"), Error);
  CHECK_THROWS_AS(adaptive_avg_pool2d(test::rnd({2, 6, 6}, 3), 2, 2), Error);
  CHECK_THROWS_AS(adaptive_avg_pool2d(Tensor::zeros({1, 1, 0, 4}), 2, 2), Error);
  CHECK_THROWS_AS(global_avg_pool(test::rnd({2, 6}, 3)), Error);
}

}  // namespace
}  // namespace rt
