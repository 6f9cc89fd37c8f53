// dropout: the mask is exactly Generator's uniform draws in logical order
// (Note [Dropout mask]), whatever the memory format; kept elements scaled by 1 / (1 - p)
// (f32: the product in double, rounded once); the generator's advance; eval, p = 0 and p = 1
// like PyTorch; the kept fraction; the backward (the same mask, recomputed) and gradcheck in
// f64; errors.
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "engine/random.h"
#include "engine/profiler.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::op_events;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;

// The expected y (logical order) for x's logical values from generator state `state`.
std::vector<double> reference(const std::vector<double>& xv, uint64_t state, double p, DType t) {
  Generator g(state);
  const double scale = 1.0 / (1.0 - p);
  std::vector<double> y(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i] * (g.uniform() >= p ? scale : 0.0);
    y[i] = t == DType::f32 ? double(float(v)) : v;
  }
  return y;
}

TEST_CASE("dropout keeps element i when draw i of the generator is >= p, scaled by 1 / (1 - p)") {
  const std::vector<Shape> shapes = {{1000}, {7, 13}, {2, 3, 5, 4}, {1, 1, 1, 1}, {3, 1, 2, 5, 2}};
  uint64_t seed = 10;
  for (const Shape& s : shapes)
    for (double p : {0.1, 0.5, 0.9})
      for (DType t : {DType::f64, DType::f32})
        for (MemoryFormat f : s.size() == 4 ? std::vector<MemoryFormat>{kNCHW, kNHWC}
                                            : std::vector<MemoryFormat>{kNCHW}) {
          const std::string what = detail::cat(shape_str(s), " p ", p, " ", dtype_name(t), " ", test::fmt_name(f));
          CAPTURE(what);
          const Tensor x = test::rnd(s, ++seed, t, f);
          Generator g(1234 + seed);
          const uint64_t state = g.state();
          const Tensor y = dropout(x, p, true, g);
          CHECK(y.shape() == s);
          CHECK(y.format() == f);
          CHECK(y.dtype() == t);
          // Exact: the mask is the same draws, the product the same rounding.
          test::check_close(y, reference(x.to_vector<double>(), state, p, t), test::Tol{0, 0}, what);
          Generator h(state);
          h.skip(uint64_t(x.numel()));
          CHECK(g.state() == h.state());  // advanced by numel draws, like rand_uniform
        }
}

TEST_CASE("the mask follows logical indices: NCHW and NHWC inputs give the same values") {
  const Tensor x = test::rnd({2, 5, 3, 4}, 1);
  Generator a(77), b(77);
  const Tensor y1 = dropout(x, 0.4, true, a), y2 = dropout(x.to(kNHWC), 0.4, true, b);
  test::check_close(y2, y1.to_vector<double>(), test::Tol{0, 0}, "formats");
}

TEST_CASE("dropout keeps about 1 - p of a large tensor") {
  Generator g(5);
  const Tensor x = Tensor::full({200000}, 1.0, DType::f32);
  for (double p : {0.1, 0.5, 0.8}) {
    const std::vector<double> y = dropout(x, p, true, g).to_vector<double>();
    double kept = 0;
    for (double v : y) kept += v != 0;
    const double n = double(y.size()), sd = std::sqrt(n * p * (1 - p));
    CHECK(std::abs(kept - n * (1 - p)) < 6 * sd);
  }
}

TEST_CASE("dropout in eval, with p = 0 or empty: x itself and no draw; p = 1: zeros, no draw") {
  const Tensor x = test::rnd({4, 5}, 2);
  Generator g(9);
  const uint64_t s0 = g.state();
  CHECK(dropout(x, 0.5, false, g).same(x));
  CHECK(dropout(x, 0.0, true, g).same(x));
  const Tensor e = Tensor::zeros({0, 3}, DType::f64);
  CHECK(dropout(e, 0.5, true, g).same(e));
  CHECK(g.state() == s0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor xn = test::leaf(Tensor::from_vector(std::vector<double>{1, -2, nan, 4}, {4}));
  const Tensor y = dropout(xn, 1.0, true, g);
  CHECK(g.state() == s0);
  const std::vector<double> yv = y.to_vector<double>();
  CHECK(yv[0] == 0);
  CHECK(std::signbit(yv[1]));  // x * 0, like PyTorch
  CHECK(std::isnan(yv[2]));
  sum(y, {0}).backward(Tensor::full({}, 1.0, DType::f64));
  test::check_close(xn.grad(), {0, 0, 0, 0}, test::kTolF64, "p = 1 gradient");
}

TEST_CASE("the backward applies the forward's mask and scale") {
  for (MemoryFormat f : {kNCHW, kNHWC}) {
    const Tensor x = test::leaf(test::rnd({2, 3, 4, 5}, 3, DType::f64, f));
    Generator g(11);
    const uint64_t state = g.state();
    const Tensor y = dropout(x, 0.3, true, g);
    const Tensor seed = test::rnd({2, 3, 4, 5}, 4);  // NCHW whatever y's format
    y.backward(seed);
    CHECK(x.grad().format() == f);
    test::check_close(x.grad(), reference(seed.to_vector<double>(), state, 0.3, DType::f64), test::kTolF64,
                      test::fmt_name(f));
  }
}

TEST_CASE("dropout passes gradcheck (a fixed generator state per call)") {
  for (MemoryFormat f : {kNCHW, kNHWC}) {
    const Tensor x = test::leaf(test::rnd({2, 3, 2, 3}, 6, DType::f64, f));
    test::check_gradcheck(
        [](const std::vector<Tensor>& in) {
          Generator g(21);
          return dropout(in[0], 0.35, true, g);
        },
        {x}, test::fmt_name(f));
  }
}

TEST_CASE("dropout opens a profiler scope with its cost") {
  const Tensor x = test::leaf(test::rnd({3, 4}, 1));
  Generator g(3);
  const std::vector<prof::Event> ev = op_events([&] { dropout(x, 0.5, true, g).backward(test::rnd({3, 4}, 2)); },
                                                "dropout");
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].cost.flops == 3 * 12);
  CHECK(ev[0].cost.bytes == 2 * 12 * 8);
}

TEST_CASE("dropout rejects bad arguments with clear messages") {
  Generator g(1);
  const Tensor x = test::rnd({3}, 1);
  CHECK_THROWS_WITH_AS(dropout(x, -0.1, true, g), doctest::Contains("p must be in [0, 1]"), Error);
  CHECK_THROWS_WITH_AS(dropout(x, 1.5, false, g), doctest::Contains("p must be in [0, 1]"), Error);
  CHECK_THROWS_WITH_AS(dropout(Tensor::zeros({3}, DType::i64), 0.5, true, g), doctest::Contains("dropout"), Error);
}

}  // namespace
}  // namespace rt
