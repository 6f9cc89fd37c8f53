// Elementwise, reduction and shape ops: forward against std:: math on the logical values,
// gradients by gradcheck in f64, mixed memory formats, the in-place ops and views.
#include <cmath>
#include <functional>

#include "engine/ops.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::fmt_name;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous;
constexpr MemoryFormat kNHWC = MemoryFormat::channels_last;

// Shapes with the formats they can take.
struct ShapeCase {
  Shape s;
  std::vector<MemoryFormat> formats;
};
const std::vector<ShapeCase> kShapes = {
    {{2, 3, 4, 5}, {kNCHW, kNHWC}},
    {{1, 4, 3, 1}, {kNCHW, kNHWC}},
    {{3, 7}, {kNCHW}},
    {{11}, {kNCHW}},
};

std::vector<double> map1(const std::vector<double>& a, const std::function<double(double)>& f) {
  std::vector<double> y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = f(a[i]);
  return y;
}
std::vector<double> map2(const std::vector<double>& a, const std::vector<double>& b,
                         const std::function<double(double, double)>& f) {
  std::vector<double> y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = f(a[i], b[i]);
  return y;
}

// Positive values (sqrt): |x| + 0.25.
Tensor positive(const Shape& s, uint64_t seed, DType dt = DType::f64, MemoryFormat f = kNCHW) {
  const Tensor x = test::rnd(s, seed);
  return Tensor::from_vector(map1(x.to_vector<double>(), [](double v) { return std::abs(v) + 0.25; }), s).to(dt).to(f);
}

struct Binop {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
};
const std::vector<Binop> kBinops = {
    {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
    {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }},
    {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }},
    {"add_relu", [](const Tensor& a, const Tensor& b) { return add_relu(a, b); },
     [](double a, double b) { return a + b > 0 ? a + b : 0.0; }},
};

struct Unop {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  bool positive_input;
};
const std::vector<Unop> kUnops = {
    {"relu", [](const Tensor& x) { return relu(x); }, [](double v) { return v > 0 ? v : 0.0; }, false},
    {"square", [](const Tensor& x) { return square(x); }, [](double v) { return v * v; }, false},
    {"sqrt", [](const Tensor& x) { return rt::sqrt(x); }, [](double v) { return std::sqrt(v); }, true},
    {"mul_scalar", [](const Tensor& x) { return mul(x, -2.5); }, [](double v) { return v * -2.5; }, false},
    {"add_scalar", [](const Tensor& x) { return add(x, 0.75); }, [](double v) { return v + 0.75; }, false},
    {"mul_scalar_0", [](const Tensor& x) { return mul(x, 0.0); }, [](double) { return 0.0; }, false},
};

// ---- binary --------------------------------------------------------------------------

TEST_CASE("binary ops match the definition in every dtype and format, mixed formats included") {
  for (size_t si = 0; si < kShapes.size(); ++si) {
    const ShapeCase& sc = kShapes[si];
    const Tensor a = test::rnd(sc.s, 10 + si), b = test::rnd(sc.s, 20 + si);
    for (const Binop& bo : kBinops)
      for (DType dt : {DType::f64, DType::f32}) {
        const std::vector<double> want = map2(a.to(dt).to_vector<double>(), b.to(dt).to_vector<double>(), bo.ref);
        for (MemoryFormat fa : sc.formats)
          for (MemoryFormat fb : sc.formats) {
            const Tensor y = bo.op(a.to(dt).to(fa), b.to(dt).to(fb));
            // The result takes a's format (b is converted).
            CHECK(y.format() == fa);
            CHECK(y.shape() == sc.s);
            CHECK(y.dtype() == dt);
            // One rounding of an exact operation: f32 matches the f32-rounded reference closely.
            test::check_close(y, want, test::tol_for(dt),
                              detail::cat(bo.name, " ", shape_str(sc.s), " ", dtype_name(dt), " a ", fmt_name(fa),
                                          " b ", fmt_name(fb)));
          }
      }
  }
}

TEST_CASE("binary ops pass gradcheck, mixed formats included") {
  for (size_t si = 0; si < kShapes.size(); ++si) {
    const ShapeCase& sc = kShapes[si];
    for (const Binop& bo : kBinops)
      for (MemoryFormat fa : sc.formats)
        for (MemoryFormat fb : sc.formats) {
          const Tensor a = test::leaf(test::rnd(sc.s, 30 + si, DType::f64, fa));
          const Tensor b = test::leaf(test::rnd(sc.s, 40 + si, DType::f64, fb));
          test::check_gradcheck([&](const std::vector<Tensor>& in) { return bo.op(in[0], in[1]); }, {a, b},
                                detail::cat(bo.name, " ", shape_str(sc.s), " a ", fmt_name(fa), " b ", fmt_name(fb)));
          // Each leaf's gradient comes back in its own format.
          CHECK(a.grad().format() == fa);
          CHECK(b.grad().format() == fb);
        }
  }
}

TEST_CASE("binary ops with the same tensor on both sides") {
  // d(x*x)/dx = 2x, d(x+x)/dx = 2, d(x-x)/dx = 0: both edges accumulate into one leaf.
  const Tensor x = test::leaf(test::rnd({2, 3, 2, 2}, 1, DType::f64, kNHWC));
  const std::vector<double> xv = x.to_vector<double>();
  sum(mul(x, x)).backward();
  test::check_close(x.grad(), map1(xv, [](double v) { return 2 * v; }), test::kTolF64, "mul(x, x)");
  x.zero_grad();
  sum(add(x, x)).backward();
  test::check_close(x.grad(), map1(xv, [](double) { return 2.0; }), test::kTolF64, "add(x, x)");
  x.zero_grad();
  sum(sub(x, x)).backward();
  test::check_close(x.grad(), map1(xv, [](double) { return 0.0; }), test::kTolF64, "sub(x, x)");
  for (MemoryFormat f : {kNCHW, kNHWC}) {
    const Tensor y = test::leaf(test::rnd({2, 3, 2, 2}, 2, DType::f64, f));
    test::check_gradcheck([](const std::vector<Tensor>& in) { return mul(in[0], in[0]); }, {y},
                          detail::cat("mul(x, x) ", fmt_name(f)));
  }
}

// ---- unary ---------------------------------------------------------------------------

TEST_CASE("unary and scalar ops match the definition in every dtype and format") {
  for (size_t si = 0; si < kShapes.size(); ++si) {
    const ShapeCase& sc = kShapes[si];
    for (const Unop& uo : kUnops) {
      const Tensor x = uo.positive_input ? positive(sc.s, 50 + si) : test::rnd(sc.s, 50 + si);
      for (DType dt : {DType::f64, DType::f32}) {
        const std::vector<double> want = map1(x.to(dt).to_vector<double>(), uo.ref);
        for (MemoryFormat f : sc.formats) {
          const Tensor y = uo.op(x.to(dt).to(f));
          CHECK(y.format() == f);
          CHECK(y.dtype() == dt);
          test::check_close(y, want, test::tol_for(dt),
                            detail::cat(uo.name, " ", shape_str(sc.s), " ", dtype_name(dt), " ", fmt_name(f)));
        }
      }
    }
  }
}

TEST_CASE("unary and scalar ops pass gradcheck") {
  for (size_t si = 0; si < kShapes.size(); ++si) {
    const ShapeCase& sc = kShapes[si];
    for (const Unop& uo : kUnops)
      for (MemoryFormat f : sc.formats) {
        const Tensor x = test::leaf(uo.positive_input ? positive(sc.s, 60 + si, DType::f64, f)
                                                      : test::rnd(sc.s, 60 + si, DType::f64, f));
        test::check_gradcheck([&](const std::vector<Tensor>& in) { return uo.op(in[0]); }, {x},
                              detail::cat(uo.name, " ", shape_str(sc.s), " ", fmt_name(f)));
        CHECK(x.grad().format() == f);
      }
  }
}

TEST_CASE("relu passes no gradient where its input is negative") {
  const Tensor x = test::leaf(Tensor::from_vector(std::vector<double>{-2, -0.5, 0.5, 3}, {4}));
  sum(mul(relu(x), 3.0)).backward();
  test::check_close(x.grad(), {0, 0, 3, 3}, test::kTolF64, "relu grad");
  const Tensor a = test::leaf(Tensor::from_vector(std::vector<double>{1, -1, 2, -3}, {4}));
  const Tensor b = test::leaf(Tensor::from_vector(std::vector<double>{-2, 2, 1, 1}, {4}));
  sum(add_relu(a, b)).backward();  // a + b = -1, 1, 3, -2
  test::check_close(a.grad(), {0, 1, 1, 0}, test::kTolF64, "add_relu grad a");
  test::check_close(b.grad(), {0, 1, 1, 0}, test::kTolF64, "add_relu grad b");
}

TEST_CASE("backward converts an incoming gradient of the other format") {
  // add(c, op(x)) takes c's format, so op's backward receives its gradient in c's format
  // while its own output (and saved tensors) are in x's.
  const Shape s{2, 3, 3, 4};
  for (MemoryFormat fx : {kNCHW, kNHWC}) {
    const MemoryFormat fc = fx == kNCHW ? kNHWC : kNCHW;
    for (const Unop& uo : kUnops) {
      const Tensor x = test::leaf(uo.positive_input ? positive(s, 110, DType::f64, fx) : test::rnd(s, 110, DType::f64, fx));
      const Tensor c = test::leaf(test::rnd(s, 111, DType::f64, fc));
      test::check_gradcheck([&](const std::vector<Tensor>& in) { return add(in[1], uo.op(in[0])); }, {x, c},
                            detail::cat(uo.name, " x ", fmt_name(fx), " gradient ", fmt_name(fc)));
    }
    for (const Binop& bo : kBinops) {
      const Tensor a = test::leaf(test::rnd(s, 112, DType::f64, fx));
      const Tensor b = test::leaf(test::rnd(s, 113, DType::f64, fx));
      const Tensor c = test::leaf(test::rnd(s, 114, DType::f64, fc));
      test::check_gradcheck([&](const std::vector<Tensor>& in) { return add(in[2], bo.op(in[0], in[1])); }, {a, b, c},
                            detail::cat(bo.name, " operands ", fmt_name(fx), " gradient ", fmt_name(fc)));
    }
    const Tensor x = test::leaf(test::rnd(s, 115, DType::f64, fx));
    const Tensor c = test::leaf(test::rnd(s, 116, DType::f64, fc));
    test::check_gradcheck([&](const std::vector<Tensor>& in) { return add(in[1], square(to_format(in[0], fc))); },
                          {x, c}, detail::cat("to_format ", fmt_name(fx), " -> ", fmt_name(fc)));
  }
}

// ---- reductions ------------------------------------------------------------------------

TEST_CASE("sum and mean reduce every element to a 0-D tensor") {
  const std::vector<Shape> shapes = {{2, 3, 4, 5}, {3, 7}, {1}, {}, {40, 50, 30}};  // the last crosses the parallel grain
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& s = shapes[si];
    const Tensor x = test::rnd(s, 70 + si);
    for (DType dt : {DType::f64, DType::f32}) {
      const std::vector<double> xv = x.to(dt).to_vector<double>();
      double total = 0;
      for (double v : xv) total += v;
      for (MemoryFormat f : s.size() == 4 ? std::vector<MemoryFormat>{kNCHW, kNHWC} : std::vector<MemoryFormat>{kNCHW}) {
        const std::string what = detail::cat(shape_str(s), " ", dtype_name(dt), " ", fmt_name(f));
        const Tensor ys = sum(x.to(dt).to(f)), ym = mean(x.to(dt).to(f));
        CHECK(ys.ndim() == 0);
        CHECK(ym.ndim() == 0);
        CHECK(ys.dtype() == dt);
        test::check_close(ys, {total}, test::tol_for(dt), what + " sum");
        test::check_close(ym, {total / double(xv.size())}, test::tol_for(dt), what + " mean");
      }
    }
  }
}

TEST_CASE("sum and mean pass gradcheck") {
  for (const ShapeCase& sc : kShapes)
    for (MemoryFormat f : sc.formats) {
      const Tensor x = test::leaf(test::rnd(sc.s, 80, DType::f64, f));
      test::check_gradcheck([](const std::vector<Tensor>& in) { return sum(in[0]); }, {x},
                            detail::cat("sum ", shape_str(sc.s), " ", fmt_name(f)));
      CHECK(x.grad().format() == f);
      test::check_gradcheck([](const std::vector<Tensor>& in) { return mean(in[0]); }, {x},
                            detail::cat("mean ", shape_str(sc.s), " ", fmt_name(f)));
    }
  // d mean / dx = 1 / numel exactly.
  const Tensor x = test::leaf(test::rnd({4, 5}, 81));
  mean(x).backward();
  test::check_close(x.grad(), std::vector<double>(20, 1.0 / 20), test::kTolF64, "mean grad");
}

// ---- shape ---------------------------------------------------------------------------

// Shape and format changes only move values: they must match exactly (Tol{0, 0}).

TEST_CASE("reshape keeps the logical order; a view when contiguous") {
  const Tensor x = test::rnd({2, 3, 4, 5}, 90);
  const std::vector<double> xv = x.to_vector<double>();
  for (MemoryFormat f : {kNCHW, kNHWC}) {
    const Tensor xf = x.to(f);
    for (const Shape& s : std::vector<Shape>{{6, 20}, {120}, {2, -1}, {4, 3, 10}, {2, 5, 3, 4}}) {
      const Tensor y = reshape(xf, s);
      CHECK(y.numel() == 120);
      CHECK(y.format() == kNCHW);
      test::check_close(y, xv, test::Tol{0, 0}, detail::cat(fmt_name(f), " -> ", shape_str(s)));
      if (f == kNCHW) CHECK_MESSAGE(y.raw_data() == xf.raw_data(), "reshape of a contiguous tensor is a view");
    }
  }
  CHECK(reshape(x, {2, -1}).shape() == Shape{2, 60});
  CHECK_THROWS_AS(reshape(x, {7, -1}), Error);
  CHECK_THROWS_AS(reshape(x, {2, 3}), Error);
}

TEST_CASE("flatten merges trailing dims; channels_last (N, C, 1, 1) -> (N, C) is a view") {
  const Tensor x = test::rnd({2, 3, 4, 5}, 91);
  const std::vector<double> xv = x.to_vector<double>();
  for (MemoryFormat f : {kNCHW, kNHWC}) {
    CHECK(flatten(x.to(f)).shape() == Shape{2, 60});
    CHECK(flatten(x.to(f), 0).shape() == Shape{120});
    CHECK(flatten(x.to(f), 2).shape() == Shape{2, 3, 20});
    CHECK(flatten(x.to(f), -1).shape() == Shape{2, 3, 4, 5});
    // C, H, W in logical order, whatever the memory order.
    test::check_close(flatten(x.to(f)), xv, test::Tol{0, 0}, detail::cat("flatten ", fmt_name(f)));
  }
  // A ResNet head: pooled (N, C, 1, 1) channels_last is (N, C) in memory already.
  const Tensor p = test::rnd({3, 8, 1, 1}, 92, DType::f64, kNHWC);
  const Tensor y = flatten(p);
  CHECK(y.shape() == Shape{3, 8});
  CHECK(y.format() == kNCHW);
  CHECK_MESSAGE(y.raw_data() == p.raw_data(), "flatten of a channels_last (N, C, 1, 1) tensor must be a view");
  test::check_close(y, p.to_vector<double>(), test::Tol{0, 0}, "pooled values");
  CHECK_THROWS_AS(flatten(x, 4), Error);
  CHECK_THROWS_AS(flatten(x, -5), Error);
}

TEST_CASE("reshape and flatten pass gradcheck in both layouts") {
  for (MemoryFormat f : {kNCHW, kNHWC}) {
    const Tensor x = test::leaf(test::rnd({2, 3, 2, 3}, 93, DType::f64, f));
    test::check_gradcheck([](const std::vector<Tensor>& in) { return reshape(in[0], {6, 6}); }, {x},
                          detail::cat("reshape ", fmt_name(f)));
    CHECK(x.grad().format() == f);
    test::check_gradcheck([](const std::vector<Tensor>& in) { return flatten(in[0]); }, {x},
                          detail::cat("flatten ", fmt_name(f)));
    // Through a following op, so the view's gradient really flows back.
    test::check_gradcheck([](const std::vector<Tensor>& in) { return square(flatten(in[0], 2)); }, {x},
                          detail::cat("square(flatten(x, 2)) ", fmt_name(f)));
    const Tensor p = test::leaf(test::rnd({3, 4, 1, 1}, 94, DType::f64, f));
    test::check_gradcheck([](const std::vector<Tensor>& in) { return mul(flatten(in[0]), 2.0); }, {p},
                          detail::cat("flatten (N, C, 1, 1) ", fmt_name(f)));
    CHECK(p.grad().format() == f);
  }
}

TEST_CASE("to_format relayouts without changing values, and back") {
  const Tensor x = test::rnd({2, 3, 4, 5}, 95);
  const std::vector<double> xv = x.to_vector<double>();
  const Tensor y = to_format(x, kNHWC);
  CHECK(y.format() == kNHWC);
  test::check_close(y, xv, test::Tol{0, 0}, "to channels_last");
  // Memory order really is N, H, W, C: element (n, c, h, w) at ((n*H + h)*W + w)*C + c.
  const double* p = y.data<double>();
  int bad = 0;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t w = 0; w < 5; ++w)
          bad += p[((n * 4 + h) * 5 + w) * 3 + c] != xv[size_t(((n * 3 + c) * 4 + h) * 5 + w)];
  CHECK(bad == 0);
  const Tensor z = to_format(y, kNCHW);
  CHECK(z.format() == kNCHW);
  test::check_close(z, xv, test::Tol{0, 0}, "and back");
  CHECK(to_format(x, kNCHW).same(x));  // already so: the same tensor
  CHECK_THROWS_AS(to_format(test::rnd({3, 4}, 1), kNHWC), Error);
}

TEST_CASE("to_format passes gradcheck") {
  for (MemoryFormat from : {kNCHW, kNHWC})
    for (MemoryFormat to : {kNCHW, kNHWC}) {
      const Tensor x = test::leaf(test::rnd({2, 3, 2, 3}, 96, DType::f64, from));
      test::check_gradcheck([&](const std::vector<Tensor>& in) { return square(to_format(in[0], to)); }, {x},
                            detail::cat(fmt_name(from), " -> ", fmt_name(to)));
      CHECK(x.grad().format() == from);
    }
  // The relayout does not share autograd state with its input.
  const Tensor x = test::leaf(test::rnd({1, 2, 2, 2}, 97));
  const Tensor y = to_format(x, kNHWC);
  CHECK_FALSE(y.is_leaf());
  CHECK(x.is_leaf());
}

// ---- in place ------------------------------------------------------------------------

TEST_CASE("add_ and mul_ update in place") {
  for (DType dt : {DType::f64, DType::f32})
    for (MemoryFormat fa : {kNCHW, kNHWC})
      for (MemoryFormat fb : {kNCHW, kNHWC}) {
        const std::string what = detail::cat(dtype_name(dt), " a ", fmt_name(fa), " b ", fmt_name(fb));
        const Tensor a0 = test::rnd({2, 3, 4, 5}, 100).to(dt), b = test::rnd({2, 3, 4, 5}, 101).to(dt);
        const std::vector<double> av = a0.to_vector<double>(), bv = b.to_vector<double>();
        Tensor a = a0.to(fa).clone();
        const void* storage = a.raw_data();
        add_(a, b.to(fb));
        test::check_close(a, map2(av, bv, [](double x, double y) { return x + y; }), test::tol_for(dt), what + " add_");
        add_(a, b.to(fb), -0.5);
        test::check_close(a, map2(av, bv, [](double x, double y) { return x + y - 0.5 * y; }), test::tol_for(dt),
                          what + " add_ alpha");
        mul_(a, 3.0);
        test::check_close(a, map2(av, bv, [](double x, double y) { return 3 * (x + 0.5 * y); }), test::tol_for(dt),
                          what + " mul_");
        CHECK(a.raw_data() == storage);
        CHECK(a.format() == fa);
        CHECK(b.to_vector<double>() == bv);  // the source is untouched
      }
  // In place on a view writes through to the base.
  Tensor base = Tensor::zeros({4, 3}, DType::f64);
  add_(base.slice_batch(1, 3), Tensor::full({2, 3}, 2.0, DType::f64));
  mul_(base.slice_batch(2, 4), 5.0);
  test::check_close(base, {0, 0, 0, 2, 2, 2, 10, 10, 10, 0, 0, 0}, test::kTolF64, "views");
}

// ---- errors --------------------------------------------------------------------------

TEST_CASE("elementwise ops reject mismatched operands with clear messages") {
  const Tensor a = test::rnd({2, 3}, 1), b = test::rnd({3, 2}, 2), c = test::rnd({2, 3, 1}, 3);
  CHECK_THROWS_WITH_AS(add(a, b), doctest::Contains("shapes differ"), Error);
  CHECK_THROWS_WITH_AS(sub(a, b), doctest::Contains("shapes differ"), Error);
  CHECK_THROWS_WITH_AS(mul(a, c), doctest::Contains("shapes differ"), Error);
  CHECK_THROWS_WITH_AS(add_relu(a, b), doctest::Contains("shapes differ"), Error);
  CHECK_THROWS_WITH_AS(add_(a, b), doctest::Contains("shapes differ"), Error);
  CHECK_THROWS_WITH_AS(add(a, test::rnd({2, 3}, 4, DType::f32)), doctest::Contains("different dtypes"), Error);
  CHECK_THROWS_WITH_AS(add_(a, test::rnd({2, 3}, 4, DType::f32)), doctest::Contains("different dtypes"), Error);
  CHECK_THROWS_AS(add(a, Tensor()), Error);
  CHECK_THROWS_AS(relu(Tensor()), Error);
  CHECK_THROWS_AS(relu(Tensor::zeros({2}, DType::i64)), Error);
  CHECK_THROWS_AS(mean(Tensor::zeros({0}, DType::f64)), Error);
  // A failed add_ leaves its destination alone.
  const std::vector<double> before = a.to_vector<double>();
  CHECK_THROWS_AS(add_(a, b), Error);
  CHECK(a.to_vector<double>() == before);
}

}  // namespace
}  // namespace rt
