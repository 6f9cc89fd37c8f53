// softmax and log_softmax over a dim: forward against a max-subtracted loop in double on
// seeded random shapes (ranks 1-5, size-1 dims, both formats for 4-D, every dim, negative
// dims); f32 against the f64 reference; large, -inf and NaN inputs; gradients by gradcheck in
// f64 (and a gradient in the other format); the error messages.
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "engine/profiler.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::op_events;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;

// (log_)softmax of the logical values v (row-major over s) along dim d.
std::vector<double> reference(const std::vector<double>& v, const Shape& s, int d, bool log) {
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < d; ++k) outer *= s[size_t(k)];
  for (size_t k = size_t(d) + 1; k < s.size(); ++k) inner *= s[k];
  const int64_t n = s[size_t(d)];
  std::vector<double> y(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t r) { return size_t((o * n + r) * inner + i); };
      double m = -INFINITY, z = 0;
      for (int64_t r = 0; r < n; ++r) m = std::max(m, v[at(r)]);
      for (int64_t r = 0; r < n; ++r) z += std::exp(v[at(r)] - m);
      for (int64_t r = 0; r < n; ++r) y[at(r)] = log ? v[at(r)] - m - std::log(z) : std::exp(v[at(r)] - m) / z;
    }
  return y;
}

struct Case {
  Shape shape;
  int dim;
  MemoryFormat format;
};

std::vector<Case> random_cases(uint64_t seed, int count) {
  Generator g(seed);
  const int64_t sizes[] = {1, 2, 3, 5, 7, 10};
  std::vector<Case> cs;
  for (int c = 0; c < count; ++c) {
    Case k;
    const int n = int(g.randint(1, 6));
    for (int d = 0; d < n; ++d) k.shape.push_back(sizes[g.randint(0, 6)]);
    k.dim = int(g.randint(-n, n));
    k.format = n == 4 && g.randint(0, 2) == 1 ? kNHWC : kNCHW;
    cs.push_back(k);
  }
  // Long rows (the rows of a classifier's logits) and a softmax over C of an image.
  cs.push_back({{3, 1000}, 1, kNCHW});
  cs.push_back({{2, 17, 5, 4}, 1, kNHWC});
  cs.push_back({{2, 17, 5, 4}, 1, kNCHW});
  return cs;
}

std::string label(const Case& k, bool log) {
  return detail::cat(log ? "log_softmax " : "softmax ", shape_str(k.shape), " ", test::fmt_name(k.format), " dim ",
                     k.dim);
}

Tensor run(const Tensor& x, int dim, bool log) { return log ? log_softmax(x, dim) : softmax(x, dim); }

TEST_CASE("softmax and log_softmax match the reference (random shapes, both formats, f64 and f32)") {
  uint64_t seed = 100;
  for (const Case& k : random_cases(41, 100)) {
    const Tensor x64 = test::rnd(k.shape, ++seed);
    const int d = k.dim < 0 ? k.dim + int(k.shape.size()) : k.dim;
    for (bool log : {false, true}) {
      CAPTURE(label(k, log));
      // Scaled inputs (x 3) make the rows far from uniform.
      std::vector<double> xv = x64.to_vector<double>();
      for (double& v : xv) v *= 3;
      const Tensor x = Tensor::from_vector(xv, k.shape);
      const std::vector<double> want = reference(xv, k.shape, d, log);
      const Tensor y = run(x.to(k.format), k.dim, log);
      CHECK(y.shape() == k.shape);
      CHECK(y.format() == k.format);
      test::check_close(y, want, test::kTolF64, label(k, log) + " f64");
      // f32: computed in double from the f32-rounded inputs and rounded once. The inputs'
      // rounding (2^-24 relative, |x| < 15) moves a log-probability by up to ~2e-6 and a
      // probability by as much relative: 1e-5 absolute and relative covers both.
      const Tensor y32 = run(x.to(DType::f32).to(k.format), k.dim, log);
      test::check_close(y32, want, test::Tol{1e-5, 1e-5}, label(k, log) + " f32 vs f64");
    }
  }
}

TEST_CASE("softmax is stable for large inputs; -inf gets probability 0; a row of -inf is NaN") {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = Tensor::from_vector(std::vector<double>{1000, 1001, 1002, /**/ -inf, 0, 0, /**/ -inf, -inf, -inf},
                                       {3, 3});
  const std::vector<double> p = softmax(x, 1).to_vector<double>(), lp = log_softmax(x, 1).to_vector<double>();
  const double z = 1 + std::exp(1.0) + std::exp(2.0);
  test::check_close(std::vector<double>(p.begin(), p.begin() + 6),
                    {1 / z, std::exp(1.0) / z, std::exp(2.0) / z, 0, 0.5, 0.5}, test::kTolF64, "values");
  test::check_close(std::vector<double>(lp.begin() + 1, lp.begin() + 3), {1 - std::log(z), 2 - std::log(z)},
                    test::kTolF64, "log values");
  CHECK(lp[3] == -inf);
  for (int i = 6; i < 9; ++i) CHECK(std::isnan(p[size_t(i)]));
  for (DType t : {DType::f32, DType::f64}) {  // rows sum to 1
    const Tensor s = sum(softmax(test::rnd({4, 50}, 3, t), -1), {1});
    test::check_close(s, std::vector<double>(4, 1.0), test::Tol{1e-6, 0}, "row sums");
  }
}

TEST_CASE("softmax and log_softmax pass gradcheck (random shapes, both formats)") {
  uint64_t seed = 300;
  for (const Case& k : random_cases(42, 24)) {
    if (shape_numel(k.shape) > 300) continue;  // gradcheck is O(numel * forward)
    for (bool log : {false, true}) {
      const Tensor x = test::leaf(test::rnd(k.shape, ++seed, DType::f64, k.format));
      test::check_gradcheck([&](const std::vector<Tensor>& in) { return run(in[0], k.dim, log); }, {x},
                            label(k, log));
      CHECK(x.grad().format() == k.format);
    }
  }
}

TEST_CASE("the softmax backward takes a gradient in the other format") {
  const Tensor x64 = test::rnd({2, 5, 3, 4}, 5), seed = test::rnd({2, 5, 3, 4}, 6);
  for (bool log : {false, true}) {
    const Tensor x = test::leaf(x64.to(kNHWC)), xr = test::leaf(x64);
    run(x, 1, log).backward(seed);  // NCHW gradient for an NHWC output
    run(xr, 1, log).backward(seed);
    CHECK(x.grad().format() == kNHWC);
    test::check_close(x.grad(), xr.grad(), test::kTolF64, log ? "log_softmax" : "softmax");
  }
}

TEST_CASE("softmax and log_softmax open profiler scopes with their cost") {
  const Tensor x = test::leaf(test::rnd({3, 4}, 1));
  for (bool log : {false, true}) {
    const std::vector<prof::Event> ev =
        op_events([&] { run(x, 1, log).backward(test::rnd({3, 4}, 2)); }, log ? "log_softmax" : "softmax");
    REQUIRE(ev.size() == 2);
    CHECK(ev[0].cost.flops == 5 * 12);
    CHECK(ev[1].backward);
  }
}

TEST_CASE("softmax rejects bad arguments with clear messages") {
  CHECK_THROWS_WITH_AS(softmax(test::rnd({2, 3}, 1), 2), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(log_softmax(Tensor::zeros({3}, DType::i64), 0), doctest::Contains("log_softmax"), Error);
  CHECK_THROWS_WITH_AS(softmax(Tensor(), 0), doctest::Contains("softmax"), Error);
}

}  // namespace
}  // namespace rt
