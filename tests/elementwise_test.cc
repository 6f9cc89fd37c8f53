// Elementwise, reduction and shape ops: forward against std:: math on the logical values,
// gradients by gradcheck in f64, mixed memory formats, the in-place ops and views.
// Broadcasting binary ops: forward and gradients against a plain f64 reference indexed by
// logical coordinates (written here, independent of the op table), gradcheck, named and
// seeded random shape pairs in both layouts, f32 against f64, the plan's dim merging, and
// sums that do not depend on the thread count.
#include <omp.h>

#include <cmath>
#include <functional>
#include <random>

#include "engine/gradcheck.h"
#include "engine/ops.h"
#include "engine/ops/broadcast.h"
#include "kernels/elementwise_ops.h"
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

// Values away from 0 (a divisor): sign(v) * (|v| + 0.5).
Tensor away_from_zero(const Tensor& x) {
  const std::vector<double> v = x.contiguous().to_vector<double>();
  std::vector<double> w(v.size());
  for (size_t i = 0; i < v.size(); ++i) w[i] = v[i] < 0 ? v[i] - 0.5 : v[i] + 0.5;
  return Tensor::from_vector(w, x.shape()).to(x.dtype()).to(x.format());
}

// A binary op with its definition and partial derivatives (in double, for the references).
struct Binop {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  std::function<double(double, double)> d_a, d_b;
  bool b_away_from_zero = false;  // div
};
const std::vector<Binop> kBinops = {
    {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; },
     [](double, double) { return 1.0; }, [](double, double) { return 1.0; }},
    {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; },
     [](double, double) { return 1.0; }, [](double, double) { return -1.0; }},
    {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; },
     [](double, double b) { return b; }, [](double a, double) { return a; }},
    {"add_relu", [](const Tensor& a, const Tensor& b) { return add_relu(a, b); },
     [](double a, double b) { return a + b > 0 ? a + b : 0.0; },
     [](double a, double b) { return a + b > 0 ? 1.0 : 0.0; }, [](double a, double b) { return a + b > 0 ? 1.0 : 0.0; }},
    {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; },
     [](double, double b) { return 1 / b; }, [](double a, double b) { return -a / (b * b); }, true},
};

// The second operand of a binary op's test: random, away from 0 for div.
Tensor operand_b(const Binop& bo, const Shape& s, uint64_t seed, DType dt = DType::f64, MemoryFormat f = kNCHW) {
  const Tensor b = test::rnd(s, seed, dt, f);
  return bo.b_away_from_zero ? away_from_zero(b) : b;
}

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
    {"exp", [](const Tensor& x) { return rt::exp(x); }, [](double v) { return std::exp(v); }, false},
    {"log", [](const Tensor& x) { return rt::log(x); }, [](double v) { return std::log(v); }, true},
    {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double v) { return 1 / (1 + std::exp(-v)); }, false},
    {"tanh", [](const Tensor& x) { return rt::tanh(x); }, [](double v) { return std::tanh(v); }, false},
    {"neg", [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, false},
    {"silu", [](const Tensor& x) { return silu(x); }, [](double v) { return v / (1 + std::exp(-v)); }, false},
    {"pow 3", [](const Tensor& x) { return rt::pow(x, 3.0); }, [](double v) { return v * v * v; }, false},
    {"pow 2.5", [](const Tensor& x) { return rt::pow(x, 2.5); }, [](double v) { return std::pow(v, 2.5); }, true},
    {"pow -1.5", [](const Tensor& x) { return rt::pow(x, -1.5); }, [](double v) { return std::pow(v, -1.5); }, true},
    {"pow 1", [](const Tensor& x) { return rt::pow(x, 1.0); }, [](double v) { return v; }, false},
    {"pow 0", [](const Tensor& x) { return rt::pow(x, 0.0); }, [](double) { return 1.0; }, false},
    {"mul_scalar", [](const Tensor& x) { return mul(x, -2.5); }, [](double v) { return v * -2.5; }, false},
    {"add_scalar", [](const Tensor& x) { return add(x, 0.75); }, [](double v) { return v + 0.75; }, false},
    {"mul_scalar_0", [](const Tensor& x) { return mul(x, 0.0); }, [](double) { return 0.0; }, false},
};

// Every entry of the op table (Note [Elementwise op table]) has a row above, by name ("pow"
// by its "pow 3", "pow 2.5", ...): an op added to kernels/elementwise_ops.h without a
// reference here fails.
bool has_row(const std::string& op) {
  const auto named = [&](const char* row) { return row == op || std::string(row).rfind(op + " ", 0) == 0; };
  for (const Unop& u : kUnops)
    if (named(u.name)) return true;
  for (const Binop& b : kBinops)
    if (named(b.name)) return true;
  return false;
}

TEST_CASE("every op of the table has a reference row") {
#define RT_EW_ROW(op, Op) CHECK_MESSAGE(has_row(ew::name(ew::Unary::op)), #op " has no row in kUnops");
  RT_EW_UNARY_OPS(RT_EW_ROW)
#undef RT_EW_ROW
#define RT_EW_ROW(op, Op) CHECK_MESSAGE(has_row(ew::name(ew::Binary::op)), #op " has no row in kBinops");
  RT_EW_BINARY_OPS(RT_EW_ROW)
#undef RT_EW_ROW
}

// ---- binary --------------------------------------------------------------------------

TEST_CASE("binary ops match the definition in every dtype and format, mixed formats included") {
  for (size_t si = 0; si < kShapes.size(); ++si) {
    const ShapeCase& sc = kShapes[si];
    const Tensor a = test::rnd(sc.s, 10 + si);
    for (const Binop& bo : kBinops)
      for (DType dt : {DType::f64, DType::f32}) {
        const Tensor b = operand_b(bo, sc.s, 20 + si);
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
          const Tensor b = test::leaf(operand_b(bo, sc.s, 40 + si, DType::f64, fb));
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
      const Tensor b = test::leaf(operand_b(bo, s, 113, DType::f64, fx));
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

// ---- broadcasting ----------------------------------------------------------------------

// The broadcast shape by the rule (the test's own copy).
Shape bshape(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape o(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1, y = i < b.size() ? b[b.size() - 1 - i] : 1;
    o[n - 1 - i] = x == 1 ? y : x;
  }
  return o;
}

// The row-major index in an operand of shape s of the output element at coordinates c.
int64_t operand_index(const Shape& s, const Shape& out, const std::vector<int64_t>& c) {
  int64_t idx = 0;
  const size_t off = out.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d) idx = idx * s[d] + (s[d] == 1 ? 0 : c[d + off]);
  return idx;
}

// y, and the gradients from upstream dy, by logical coordinates in f64 (values in logical order).
struct BroadcastRef {
  std::vector<double> y, da, db;
};
BroadcastRef broadcast_ref(const Binop& bo, const Shape& sa, const std::vector<double>& a, const Shape& sb,
                           const std::vector<double>& b, const std::vector<double>& dy) {
  const Shape out = bshape(sa, sb);
  BroadcastRef r{std::vector<double>(size_t(shape_numel(out))), std::vector<double>(a.size()),
                 std::vector<double>(b.size())};
  std::vector<int64_t> c(out.size(), 0);
  for (size_t i = 0; i < r.y.size(); ++i) {
    const size_t ia = size_t(operand_index(sa, out, c)), ib = size_t(operand_index(sb, out, c));
    r.y[i] = bo.ref(a[ia], b[ib]);
    r.da[ia] += dy[i] * bo.d_a(a[ia], b[ib]);
    r.db[ib] += dy[i] * bo.d_b(a[ia], b[ib]);
    for (int d = int(out.size()) - 1; d >= 0; --d) {
      if (++c[size_t(d)] < out[size_t(d)]) break;
      c[size_t(d)] = 0;
    }
  }
  return r;
}

std::vector<MemoryFormat> formats_for(const Shape& s) {
  return s.size() == 4 ? std::vector<MemoryFormat>{kNCHW, kNHWC} : std::vector<MemoryFormat>{kNCHW};
}

std::string pair_name(const Binop& bo, const Shape& sa, MemoryFormat fa, const Shape& sb, MemoryFormat fb) {
  return detail::cat(bo.name, " ", shape_str(sa), sa.size() == 4 ? fmt_name(fa) : "", " with ", shape_str(sb),
                     sb.size() == 4 ? fmt_name(fb) : "");
}

// Runs bo on a (shape sa, format fa) and b in dtype dt, backward from dy; checks the result
// (shape, the format rule) and both gradients (shape, the operand's own format) against the
// f64 reference on the same (dt-rounded) values.
void check_broadcast_case(const Binop& bo, const Shape& sa, MemoryFormat fa, const Shape& sb, MemoryFormat fb,
                          DType dt, uint64_t seed) {
  const std::string what = pair_name(bo, sa, fa, sb, fb) + " " + dtype_name(dt) + " seed " + std::to_string(seed);
  const Tensor a = test::leaf(test::rnd(sa, seed, dt, fa));
  const Tensor b = test::leaf(operand_b(bo, sb, seed + 1, dt, fb));
  const Shape out = bshape(sa, sb);
  const Tensor dy = test::rnd(out, seed + 2, dt);
  const BroadcastRef want = broadcast_ref(bo, sa, a.to_vector<double>(), sb, b.to_vector<double>(),
                                          dy.to_vector<double>());
  const Tensor y = bo.op(a, b);
  REQUIRE_MESSAGE(y.shape() == out, what, ": result shape ", shape_str(y.shape()));
  const MemoryFormat want_fmt = sa == out ? fa : sb == out ? fb : sa.size() == 4 ? fa : sb.size() == 4 ? fb : kNCHW;
  CHECK_MESSAGE(y.format() == (out.size() == 4 ? want_fmt : kNCHW), what, ": result format");
  test::check_close(y, want.y, test::tol_for(dt), what + " forward");
  y.backward(dy.to(y.format()));
  REQUIRE(a.grad().defined());
  REQUIRE(b.grad().defined());
  CHECK_MESSAGE(a.grad().shape() == sa, what, ": grad a shape ", shape_str(a.grad().shape()));
  CHECK_MESSAGE(b.grad().shape() == sb, what, ": grad b shape ", shape_str(b.grad().shape()));
  CHECK(a.grad().format() == fa);
  CHECK(b.grad().format() == fb);
  test::check_close(a.grad(), want.da, test::tol_for(dt), what + " grad a");
  test::check_close(b.grad(), want.db, test::tol_for(dt), what + " grad b");
}

struct PairCase {
  Shape a, b;
};
const std::vector<PairCase> kPairs = {
    {{2, 3, 4, 5}, {2, 3, 1, 1}}, {{2, 3, 4, 5}, {1, 3, 1, 1}}, {{2, 3, 4, 5}, {1, 1, 1, 1}},
    {{2, 3, 1, 1}, {2, 3, 4, 5}}, {{4, 3}, {3}},                {{3}, {4, 3}},
    {{2, 1}, {1, 3}},             {{2, 3, 4, 5}, {3, 1, 1}},    {{2, 3, 4, 5}, {5}},
    {{2, 3, 4, 5}, {}},           {{}, {3, 2}},                 {{1, 3, 1, 5}, {2, 1, 4, 1}},
    {{2, 3, 4, 5}, {2, 1, 4, 5}}, {{2, 3, 4, 5}, {2, 3, 4, 1}}, {{1, 3, 4, 5}, {2, 3, 4, 5}},
    {{5, 1, 3}, {1, 4, 1}},       {{3, 4}, {1, 1}},             {{1, 9, 1, 1}, {1, 9, 3, 3}},
};

TEST_CASE("broadcasting binary ops match the f64 reference, forward and gradients, in both layouts") {
  uint64_t seed = 1000;
  for (const PairCase& pc : kPairs)
    for (const Binop& bo : kBinops)
      for (MemoryFormat fa : formats_for(pc.a))
        for (MemoryFormat fb : formats_for(pc.b))
          for (DType dt : {DType::f64, DType::f32}) check_broadcast_case(bo, pc.a, fa, pc.b, fb, dt, seed += 3);
}

TEST_CASE("broadcasting binary ops pass gradcheck in both layouts") {
  uint64_t seed = 2000;
  for (const PairCase& pc : kPairs)
    for (const Binop& bo : kBinops)
      for (MemoryFormat fa : formats_for(pc.a))
        for (MemoryFormat fb : formats_for(pc.b)) {
          const Tensor a = test::leaf(test::rnd(pc.a, ++seed, DType::f64, fa));
          const Tensor b = test::leaf(operand_b(bo, pc.b, ++seed, DType::f64, fb));
          test::check_gradcheck([&](const std::vector<Tensor>& in) { return bo.op(in[0], in[1]); }, {a, b},
                                pair_name(bo, pc.a, fa, pc.b, fb));
        }
}

// Seeded random shape pairs: odd sizes and sizes off the vector width, 1x1 spatial, batch 1,
// missing leading dims, 0-D, random layouts.
TEST_CASE("broadcasting at seeded random shapes: reference in f64 and f32, gradcheck on the small ones") {
  std::mt19937_64 rng(20240611);
  const int64_t pool[] = {1, 2, 3, 5, 7, 9, 17};
  auto pick = [&](int64_t n) { return int64_t(rng() % uint64_t(n)); };
  for (int cs = 0; cs < 48; ++cs) {
    const int nd = int(1 + pick(4));
    Shape out(static_cast<size_t>(nd));
    for (int64_t& d : out) d = pool[pick(7)];
    while (shape_numel(out) > 2500) out[size_t(pick(nd))] = 1;
    Shape s[2];
    for (Shape& sh : s) {
      const int keep = int(pick(nd + 1));  // trailing dims kept
      sh.assign(out.end() - keep, out.end());
      for (int64_t& d : sh)
        if (pick(3) == 0) d = 1;
    }
    MemoryFormat f[2];
    for (int k = 0; k < 2; ++k) f[k] = s[k].size() == 4 && pick(2) ? kNHWC : kNCHW;
    const Binop& bo = kBinops[size_t(pick(int64_t(kBinops.size())))];
    const uint64_t seed = 5000 + uint64_t(cs) * 7;
    INFO("random case ", cs);
    for (DType dt : {DType::f64, DType::f32}) check_broadcast_case(bo, s[0], f[0], s[1], f[1], dt, seed);
    if (shape_numel(bshape(s[0], s[1])) <= 300) {
      const Tensor a = test::leaf(test::rnd(s[0], seed + 3, DType::f64, f[0]));
      const Tensor b = test::leaf(operand_b(bo, s[1], seed + 4, DType::f64, f[1]));
      test::check_gradcheck([&](const std::vector<Tensor>& in) { return bo.op(in[0], in[1]); }, {a, b},
                            pair_name(bo, s[0], f[0], s[1], f[1]) + " random case " + std::to_string(cs));
    }
  }
}

TEST_CASE("broadcasting past the parallel grain: both sum orders, results independent of the thread count") {
  // (1, C, 1, 1) and (N, C, 1, 1) against a 36864-element image (two chunks of the parallel
  // grain) in both layouts: the sum over the broadcast dims goes through chunked partial
  // copies; (2, 25000) + (25000) has too many outputs for those and sums each output in
  // turn (Note [CPU sum over broadcast dims]).
  const std::vector<PairCase> big = {{{4, 16, 24, 24}, {1, 16, 1, 1}},
                                     {{4, 16, 24, 24}, {4, 16, 1, 1}},
                                     {{4, 16, 24, 24}, {1, 1, 24, 24}},
                                     {{2, 25000}, {25000}},
                                     {{25000, 2}, {25000, 1}}};
  const Binop& mul_op = kBinops[2];
  uint64_t seed = 9000;
  for (const PairCase& pc : big)
    for (MemoryFormat fa : formats_for(pc.a))
      for (MemoryFormat fb : formats_for(pc.b)) {
        for (DType dt : {DType::f64, DType::f32}) check_broadcast_case(mul_op, pc.a, fa, pc.b, fb, dt, seed += 3);
        // One thread and all of them: the same bits.
        std::vector<double> grads[2];
        const int threads = omp_get_max_threads();
        for (int run = 0; run < 2; ++run) {
          omp_set_num_threads(run == 0 ? 1 : std::max(2, threads));
          const Tensor a = test::leaf(test::rnd(pc.a, 77, DType::f32, fa));
          const Tensor b = test::leaf(test::rnd(pc.b, 78, DType::f32, fb));
          mul(a, b).backward(test::rnd(bshape(pc.a, pc.b), 79, DType::f32));
          grads[run] = b.grad().to_vector<double>();
        }
        omp_set_num_threads(threads);
        CHECK_MESSAGE(grads[0] == grads[1], pair_name(mul_op, pc.a, fa, pc.b, fb), ": 1 thread and ",
                      std::max(2, threads), " give different sums");
      }
}

TEST_CASE("broadcasting: 0-D and empty operands") {
  const Tensor s = test::leaf(Tensor::scalar(2.5, DType::f64));
  const Tensor x = test::leaf(test::rnd({2, 3}, 1));
  const Tensor y = mul(x, s);
  CHECK(y.shape() == Shape{2, 3});
  sum(y).backward();
  CHECK(s.grad().ndim() == 0);
  double total = 0;
  for (double v : x.to_vector<double>()) total += v;
  test::check_close(s.grad(), {total}, test::kTolF64, "0-D operand's gradient");
  // An empty result: no work; the broadcast operand's gradient is zeros.
  const Tensor e = test::leaf(Tensor::zeros({0, 3}, DType::f64));
  const Tensor b = test::leaf(test::rnd({1, 3}, 2));
  const Tensor z = add(e, b);
  CHECK(z.shape() == Shape{0, 3});
  z.backward(Tensor::zeros({0, 3}, DType::f64));
  test::check_close(b.grad(), {0, 0, 0}, test::kTolF64, "gradient through an empty result");
}

TEST_CASE("the broadcast plan merges dims and reads each operand in its own layout") {
  using ops::broadcast_plan;
  // NCHW (N, C, H, W) * (N, C, 1, 1): a 2-D walk (N*C, H*W).
  ew::BroadcastPlan p = broadcast_plan({2, 3, 4, 5}, kNCHW, {2, 3, 4, 5}, kNCHW, {2, 3, 1, 1}, kNCHW);
  REQUIRE(p.nd == 2);
  CHECK(p.size[0] == 6);
  CHECK(p.size[1] == 20);
  CHECK(p.stride[0][0] == 20);
  CHECK(p.stride[0][1] == 1);
  CHECK(p.stride[1][0] == 1);
  CHECK(p.stride[1][1] == 0);
  // NHWC image times NCHW (N, C, 1, 1): memory order (N, H*W, C); b steps by its NCHW strides.
  p = broadcast_plan({2, 3, 4, 5}, kNHWC, {2, 3, 4, 5}, kNHWC, {2, 3, 1, 1}, kNCHW);
  REQUIRE(p.nd == 3);
  CHECK(p.size[0] == 2);
  CHECK(p.size[1] == 20);
  CHECK(p.size[2] == 3);
  CHECK(p.stride[1][0] == 3);
  CHECK(p.stride[1][1] == 0);
  CHECK(p.stride[1][2] == 1);
  // A (1, C, H, W) NCHW operand of an NHWC result: C is innermost in the walk, H*W apart in b.
  p = broadcast_plan({2, 3, 4, 5}, kNHWC, {2, 3, 4, 5}, kNHWC, {1, 3, 4, 5}, kNCHW);
  REQUIRE(p.nd == 3);
  CHECK(p.stride[1][2] == 20);
  // (N, C) + (C); a scalar; equal shapes are one dense dim.
  p = broadcast_plan({4, 3}, kNCHW, {4, 3}, kNCHW, {3}, kNCHW);
  REQUIRE(p.nd == 2);
  CHECK(p.stride[1][0] == 0);
  CHECK(p.stride[1][1] == 1);
  p = broadcast_plan({}, kNCHW, {}, kNCHW, {}, kNCHW);
  CHECK(p.nd == 1);
  CHECK(p.numel() == 1);
  CHECK(broadcast_plan({2, 3, 4, 5}, kNHWC, {2, 3, 4, 5}, kNHWC, {2, 3, 4, 5}, kNHWC).is_dense());
  // Shapes.
  CHECK(ops::broadcast_shape({2, 1, 4}, {3, 1}, "t") == Shape{2, 3, 4});
  CHECK(ops::broadcast_shape({0, 3}, {1, 3}, "t") == Shape{0, 3});
  CHECK_THROWS_WITH_AS(ops::broadcast_shape({0, 3}, {2, 3}, "t"), doctest::Contains("0 vs 2"), Error);
}

// ---- unary ops: f32 against f64, gradients included ---------------------------------------

TEST_CASE("unary ops in f32 match f64 forward and backward") {
  // One rounding of the result (and of the fused backward): f32 agrees with f64 on the same
  // f32 inputs to a few ulp, within test::kTolF32 (1e-5 absolute, 1e-4 relative).
  const Shape s{3, 5, 7, 9};  // 945 elements: sizes off the vector widths
  for (const Unop& uo : kUnops)
    for (MemoryFormat f : {kNCHW, kNHWC}) {
      const std::string what = detail::cat(uo.name, " ", fmt_name(f));
      const Tensor v = (uo.positive_input ? positive(s, 130) : test::rnd(s, 130)).to(DType::f32).to(f);
      const Tensor x32 = test::leaf(v), x64 = test::leaf(v.to(DType::f64));
      const Tensor dy = test::rnd(s, 131, DType::f32);
      const Tensor y32 = uo.op(x32), y64 = uo.op(x64);
      CHECK(y32.dtype() == DType::f32);
      test::check_close(y32, y64, test::kTolF32, what + " forward");
      y32.backward(dy.to(y32.format()));
      y64.backward(dy.to(DType::f64).to(y64.format()));
      test::check_close(x32.grad(), x64.grad(), test::kTolF32, what + " backward");
    }
}

TEST_CASE("the backward of each unary op is its derivative") {
  // Spot values against hand-written derivatives (gradcheck covers the rest).
  const std::vector<double> xs = {-2.0, -0.5, 0.25, 1.5};
  const Tensor x = test::leaf(Tensor::from_vector(xs, {4}));
  auto grad_of = [&](const std::function<Tensor(const Tensor&)>& f) {
    x.zero_grad();
    sum(f(x)).backward();
    return x.grad().to_vector<double>();
  };
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  std::vector<double> want(4);
  for (size_t i = 0; i < 4; ++i) want[i] = sig(xs[i]) * (1 - sig(xs[i]));
  test::check_close(grad_of([](const Tensor& t) { return sigmoid(t); }), want, test::kTolF64, "sigmoid'");
  for (size_t i = 0; i < 4; ++i) want[i] = sig(xs[i]) * (1 + xs[i] * (1 - sig(xs[i])));
  test::check_close(grad_of([](const Tensor& t) { return silu(t); }), want, test::kTolF64, "silu'");
  for (size_t i = 0; i < 4; ++i) want[i] = 1 - std::tanh(xs[i]) * std::tanh(xs[i]);
  test::check_close(grad_of([](const Tensor& t) { return rt::tanh(t); }), want, test::kTolF64, "tanh'");
  for (size_t i = 0; i < 4; ++i) want[i] = 3 * xs[i] * xs[i];
  test::check_close(grad_of([](const Tensor& t) { return rt::pow(t, 3.0); }), want, test::kTolF64, "(x^3)'");
  test::check_close(grad_of([](const Tensor& t) { return rt::pow(t, 0.0); }), {0, 0, 0, 0}, test::kTolF64, "(x^0)'");
  test::check_close(grad_of([](const Tensor& t) { return neg(t); }), {-1, -1, -1, -1}, test::kTolF64, "(-x)'");
}

// ---- gradcheck in one line -----------------------------------------------------------------

TEST_CASE("gradcheck_shapes: one line per op, a message naming the inputs when it fails") {
  auto r = gradcheck_shapes([](const std::vector<Tensor>& x) { return silu(x[0]); }, {{2, 3, 4, 5}});
  CHECK_MESSAGE(r.ok, r.message);
  r = gradcheck_shapes([](const std::vector<Tensor>& x) { return rt::log(x[0]); }, {{7}}, 3, GradcheckValues::positive);
  CHECK_MESSAGE(r.ok, r.message);
  r = gradcheck_shapes([](const std::vector<Tensor>& x) { return div(x[0], x[1]); }, {{2, 3, 4, 5}, {2, 3, 1, 1}}, 4,
                       GradcheckValues::positive, {kNHWC, kNCHW});
  CHECK_MESSAGE(r.ok, r.message);
  const std::vector<Tensor> leaves = gradcheck_leaves({{2, 3, 2, 2}, {3}}, 5, GradcheckValues::positive, {kNHWC});
  REQUIRE(leaves.size() == 2);
  CHECK(leaves[0].format() == kNHWC);
  CHECK(leaves[0].requires_grad());
  CHECK(leaves[1].dtype() == DType::f64);
  for (const Tensor& t : leaves)
    for (double v : t.to_vector<double>()) CHECK(v >= 0.25);
  // A step too coarse for exp's curvature: the check fails and says where.
  GradcheckOptions coarse;
  coarse.eps = 0.5;
  r = gradcheck_shapes([](const std::vector<Tensor>& x) { return rt::exp(x[0]); }, {{3}}, 1, GradcheckValues::normal,
                       {}, coarse);
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("gradcheck of f64[3]") == 0);
  CHECK(r.message.find("seed 1") != std::string::npos);
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
  CHECK_THROWS_WITH_AS(add(a, b), doctest::Contains("add: shapes [2, 3] and [3, 2] do not broadcast: dim -1"), Error);
  CHECK_THROWS_WITH_AS(sub(a, b), doctest::Contains("sub: shapes [2, 3] and [3, 2] do not broadcast"), Error);
  CHECK_THROWS_WITH_AS(mul(a, c), doctest::Contains("mul: shapes [2, 3] and [2, 3, 1] do not broadcast: dim -2"),
                       Error);
  CHECK_THROWS_WITH_AS(div(a, c), doctest::Contains("do not broadcast"), Error);
  CHECK_THROWS_WITH_AS(add_relu(a, b), doctest::Contains("do not broadcast"), Error);
  CHECK_THROWS_WITH_AS(add(test::rnd({2, 3, 4, 5}, 5), test::rnd({1, 4, 1, 1}, 6)),
                       doctest::Contains("shapes [2, 3, 4, 5] and [1, 4, 1, 1] do not broadcast: dim -3"), Error);
  // In place: no broadcasting.
  CHECK_THROWS_WITH_AS(add_(a, b), doctest::Contains("shapes differ"), Error);
  CHECK_THROWS_WITH_AS(add_(a, test::rnd({3}, 7)), doctest::Contains("shapes differ"), Error);
  CHECK_THROWS_WITH_AS(add(a, test::rnd({2, 3}, 4, DType::f32)), doctest::Contains("different dtypes"), Error);
  CHECK_THROWS_WITH_AS(add_(a, test::rnd({2, 3}, 4, DType::f32)), doctest::Contains("different dtypes"), Error);
  CHECK_THROWS_AS(add(a, Tensor()), Error);
  CHECK_THROWS_WITH_AS(mul(a, test::rnd({3}, 4, DType::f32)), doctest::Contains("different dtypes"), Error);
  CHECK_THROWS_AS(relu(Tensor()), Error);
  CHECK_THROWS_AS(relu(Tensor::zeros({2}, DType::i64)), Error);
  CHECK_THROWS_AS(silu(Tensor()), Error);
  CHECK_THROWS_AS(rt::exp(Tensor::zeros({2}, DType::i64)), Error);
  CHECK_THROWS_AS(mean(Tensor::zeros({0}, DType::f64)), Error);
  // A failed add_ leaves its destination alone.
  const std::vector<double> before = a.to_vector<double>();
  CHECK_THROWS_AS(add_(a, b), Error);
  CHECK(a.to_vector<double>() == before);
}

}  // namespace
}  // namespace rt
