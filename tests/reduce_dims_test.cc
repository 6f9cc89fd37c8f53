// sum / mean / max / argmax over chosen dims: forward against a loop over logical indices in
// f64, on seeded random shapes (ranks 1-5, odd and size-1 dims, batch 1, both formats for
// 4-D, dims adjacent or not, keepdim or not); f32 against the f64 reference with a bound
// that grows like sqrt(terms); the result's shape and format; gradients by gradcheck in
// f64; ties, NaN, empty reductions and the error messages.
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "engine/profiler.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::op_events;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;

enum class Red { sum, mean, max, argmax };

// The reduction of the logical values v (row-major over s) over the dims marked in `reduced`,
// in the kept dims' logical order.
std::vector<double> reference(const std::vector<double>& v, const Shape& s, const std::vector<bool>& reduced, Red r) {
  const int n = int(s.size());
  std::vector<int64_t> kept_stride(size_t(n), 0);
  int64_t out_n = 1;
  for (int d = n - 1; d >= 0; --d)
    if (!reduced[size_t(d)]) kept_stride[size_t(d)] = out_n, out_n *= s[size_t(d)];
  std::vector<double> acc(size_t(out_n), r == Red::sum || r == Red::mean ? 0.0 : -INFINITY);
  std::vector<double> arg(size_t(out_n), -1), count(size_t(out_n), 0);
  std::vector<int64_t> idx(size_t(n), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t o = 0, red_pos = 0;
    for (int d = 0; d < n; ++d) {
      if (reduced[size_t(d)]) red_pos = red_pos * s[size_t(d)] + idx[size_t(d)];
      else o += idx[size_t(d)] * kept_stride[size_t(d)];
    }
    double& a = acc[size_t(o)];
    if (r == Red::sum || r == Red::mean) {
      a += v[i];
    } else if (arg[size_t(o)] < 0 || v[i] > a || (std::isnan(v[i]) && !std::isnan(a))) {
      a = v[i];
      arg[size_t(o)] = double(red_pos);
    }
    count[size_t(o)] += 1;
    for (int d = n - 1; d >= 0 && ++idx[size_t(d)] == s[size_t(d)]; --d) idx[size_t(d)] = 0;
  }
  if (r == Red::mean)
    for (size_t o = 0; o < acc.size(); ++o) acc[o] /= count[o];
  return r == Red::argmax ? arg : acc;
}

struct Case {
  Shape shape;
  std::vector<int> dims;
  bool keepdim;
  MemoryFormat format;
};

// Seeded random cases: rank 1-5, sizes from {1, 2, 3, 5, 7, 9} (some 1), a random non-empty
// set of dims (given negative at random), both formats for 4-D.
std::vector<Case> random_cases(uint64_t seed, int count, bool single_dim) {
  Generator g(seed);
  const int64_t sizes[] = {1, 2, 3, 5, 7, 9};
  std::vector<Case> cases;
  for (int c = 0; c < count; ++c) {
    Case k;
    const int n = int(g.randint(1, 6));
    for (int d = 0; d < n; ++d) k.shape.push_back(sizes[g.randint(0, 6)]);
    if (single_dim) {
      k.dims = {int(g.randint(0, n))};
    } else {
      for (int d = 0; d < n; ++d)
        if (g.randint(0, 2) == 1) k.dims.push_back(d);
      if (k.dims.empty()) k.dims.push_back(int(g.randint(0, n)));
    }
    for (int& d : k.dims)
      if (g.randint(0, 2) == 1) d -= n;
    k.keepdim = g.randint(0, 2) == 1;
    k.format = n == 4 && g.randint(0, 2) == 1 ? kNHWC : kNCHW;
    cases.push_back(k);
  }
  return cases;
}

std::vector<bool> mask_of(const Case& k) {
  std::vector<bool> m(k.shape.size(), false);
  for (int d : k.dims) m[size_t(d < 0 ? d + int(k.shape.size()) : d)] = true;
  return m;
}

Shape out_shape(const Case& k) {
  const std::vector<bool> m = mask_of(k);
  Shape s;
  for (size_t d = 0; d < k.shape.size(); ++d)
    if (!m[d]) s.push_back(k.shape[d]);
    else if (k.keepdim) s.push_back(1);
  return s;
}

std::string label(const Case& k) {
  std::string dims;
  for (int d : k.dims) dims += std::to_string(d) + " ";
  return detail::cat(shape_str(k.shape), " ", test::fmt_name(k.format), " dims ", dims, k.keepdim ? "keepdim" : "");
}

Tensor run(Red r, const Tensor& x, const Case& k) {
  switch (r) {
    case Red::sum: return sum(x, k.dims, k.keepdim);
    case Red::mean: return mean(x, k.dims, k.keepdim);
    case Red::max: return max(x, k.dims[0], k.keepdim);
    default: return argmax(x, k.dims[0], k.keepdim);
  }
}

// The result's format (Note [Reductions over dims]): x's for a 4-D keepdim result.
MemoryFormat want_format(const Case& k) {
  return k.keepdim && k.shape.size() == 4 ? k.format : kNCHW;
}

// ---- forward ---------------------------------------------------------------------------

TEST_CASE("sum and mean over dims match the reference (random shapes, both formats, f64 and f32)") {
  uint64_t seed = 1000;
  for (const Case& k : random_cases(11, 120, false)) {
    const Tensor x64 = test::rnd(k.shape, ++seed);
    const std::vector<bool> m = mask_of(k);
    int64_t terms = 1;
    for (size_t d = 0; d < m.size(); ++d)
      if (m[d]) terms *= k.shape[d];
    for (Red r : {Red::sum, Red::mean}) {
      const std::string what = label(k) + (r == Red::sum ? " sum" : " mean");
      CAPTURE(what);
      const std::vector<double> want = reference(x64.to_vector<double>(), k.shape, m, r);
      const Tensor y = run(r, x64.to(k.format), k);
      CHECK(y.shape() == out_shape(k));
      CHECK(y.format() == want_format(k));
      test::check_close(y, want, test::kTolF64, what + " f64");
      // f32: the inputs rounded to f32 (2^-24 relative each), summed in double and rounded
      // once: the error of a sum of `terms` unit normals stays within ~1e-7 sqrt(terms);
      // 1e-6 sqrt(terms) absolute plus 1e-6 relative leaves a margin of 10.
      const Tensor y32 = run(r, x64.to(DType::f32).to(k.format), k);
      CHECK(y32.dtype() == DType::f32);
      const double scale = r == Red::mean ? 1.0 / std::sqrt(double(terms)) : std::sqrt(double(terms));
      test::check_close(y32, want, test::Tol{1e-6 * scale, 1e-6}, what + " f32 vs f64");
    }
  }
}

TEST_CASE("max and argmax over a dim match the reference (random shapes, both formats, f64 and f32)") {
  uint64_t seed = 2000;
  for (const Case& k : random_cases(12, 120, true)) {
    const Tensor x64 = test::rnd(k.shape, ++seed);
    const std::vector<bool> m = mask_of(k);
    const std::string what = label(k);
    CAPTURE(what);
    for (DType dt : {DType::f64, DType::f32}) {
      const Tensor x = x64.to(dt).to(k.format);
      const std::vector<double> xv = x.to_vector<double>();
      const Tensor y = max(x, k.dims[0], k.keepdim), i = argmax(x, k.dims[0], k.keepdim);
      CHECK(y.shape() == out_shape(k));
      CHECK(i.shape() == out_shape(k));
      CHECK(y.format() == want_format(k));
      CHECK(i.dtype() == DType::i64);
      // Values are copied, never computed: exact.
      test::check_close(y, reference(xv, k.shape, m, Red::max), test::Tol{0, 0}, what + " max");
      test::check_close(i, reference(xv, k.shape, m, Red::argmax), test::Tol{0, 0}, what + " argmax");
    }
  }
}

TEST_CASE("reductions by hand: a 2 x 3 matrix") {
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  test::check_close(sum(x, {0}), {5, 7, 9}, test::kTolF64, "sum dim 0");
  test::check_close(sum(x, {1}), {6, 15}, test::kTolF64, "sum dim 1");
  test::check_close(sum(x, {0, 1}), {21}, test::kTolF64, "sum both");
  test::check_close(mean(x, {-1}), {2, 5}, test::kTolF64, "mean dim -1");
  test::check_close(max(x, 0), {4, 5, 6}, test::kTolF64, "max dim 0");
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1});
  CHECK(sum(x, {0, 1}).shape() == Shape{});
  CHECK(sum(x, {0, 1}, true).shape() == Shape{1, 1});
}

TEST_CASE("reductions of 4-D tensors by logical dims, NCHW and NHWC alike") {
  const Tensor x = test::rnd({3, 5, 4, 6}, 7);
  const std::vector<double> xv = x.to_vector<double>();
  // Every subset of the dims, both formats, keepdim or not: the same logical values; the
  // non-adjacent subsets run two passes, NHWC over W (no keepdim) needs the final reorder.
  for (int bits = 1; bits < 16; ++bits) {
    std::vector<int> dims;
    std::vector<bool> m(4, false);
    for (int d = 0; d < 4; ++d)
      if (bits >> d & 1) dims.push_back(d), m[size_t(d)] = true;
    const std::vector<double> want = reference(xv, x.shape(), m, Red::sum);
    for (MemoryFormat f : {kNCHW, kNHWC})
      for (bool keep : {false, true}) {
        const Case k{x.shape(), dims, keep, f};
        CAPTURE(label(k));
        const Tensor y = sum(x.to(f), dims, keep);
        CHECK(y.format() == want_format(k));
        test::check_close(y, want, test::kTolF64, label(k));
      }
  }
}

TEST_CASE("global average pooling is mean over H, W: (N, C, 1, 1) in x's format, viewable as (N, C)") {
  for (MemoryFormat f : {kNCHW, kNHWC}) {
    const Tensor x = test::rnd({2, 6, 5, 3}, 8, DType::f64, f);
    const Tensor y = mean(x, {2, 3}, true);
    CHECK(y.shape() == Shape{2, 6, 1, 1});
    CHECK(y.format() == f);
    const Tensor flat = view(y, {2, 6});  // the same memory in both formats: a view
    test::check_close(flat, global_avg_pool(x), test::kTolF64, test::fmt_name(f));
    test::check_close(mean(x, {-2, -1}), global_avg_pool(x), test::kTolF64, "no keepdim");
  }
}

TEST_CASE("reducing only size-1 dims copies (and scales for mean)") {
  const Tensor x = test::rnd({3, 1, 4}, 9);
  test::check_close(sum(x, {1}), x.to_vector<double>(), test::kTolF64, "sum");
  test::check_close(mean(x, {1}, true), x.to_vector<double>(), test::kTolF64, "mean");
  CHECK(sum(x, {1}, true).shape() == Shape{3, 1, 4});
}

TEST_CASE("max: ties go to the first index, NaN wins, like PyTorch's max(dim)") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 3, 3, 2, /**/ 1, nan, 5, nan, /**/ 7, 7, 7, 7}, {3, 4});
  const std::vector<double> y = max(x, 1).to_vector<double>();
  CHECK(y[0] == 3);
  CHECK(std::isnan(y[1]));
  CHECK(y[2] == 7);
  CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0});
  // Ties along a non-innermost dim too (the tiled path).
  const Tensor t = Tensor::from_vector(std::vector<double>{2, 5, 2, 5, 1, 5}, {3, 2});
  CHECK(argmax(t, 0).to_vector<int64_t>() == std::vector<int64_t>{0, 0});
  // The gradient goes to the first maximum only.
  const Tensor l = test::leaf(Tensor::from_vector(std::vector<double>{1, 3, 3, 2}, {4}));
  max(l, 0).backward();
  test::check_close(l.grad(), {0, 1, 0, 0}, test::kTolF64, "grad to the first max");
}

TEST_CASE("empty reductions: sum 0, mean NaN; max refuses") {
  const Tensor x = Tensor::zeros({3, 0, 2}, DType::f64);
  test::check_close(sum(x, {1}), std::vector<double>(6, 0.0), test::kTolF64, "sum");
  for (double v : mean(x, {1}).to_vector<double>()) CHECK(std::isnan(v));
  CHECK(sum(x, {0}).shape() == Shape{0, 2});
  CHECK_THROWS_WITH_AS(max(x, 1), doctest::Contains("has no elements"), Error);
  CHECK(max(x, 0).shape() == Shape{0, 2});
}

// ---- gradients -------------------------------------------------------------------------

TEST_CASE("sum, mean and max over dims pass gradcheck (random shapes, both formats)") {
  uint64_t seed = 3000;
  for (const Case& k : random_cases(13, 30, false)) {
    if (shape_numel(k.shape) > 300) continue;  // gradcheck is O(numel * forward)
    const Tensor x = test::leaf(test::rnd(k.shape, ++seed, DType::f64, k.format));
    test::check_gradcheck([&](const std::vector<Tensor>& in) { return sum(in[0], k.dims, k.keepdim); }, {x},
                          label(k) + " sum");
    CHECK(x.grad().format() == k.format);
    test::check_gradcheck([&](const std::vector<Tensor>& in) { return mean(in[0], k.dims, k.keepdim); }, {x},
                          label(k) + " mean");
  }
  for (const Case& k : random_cases(14, 30, true)) {
    if (shape_numel(k.shape) > 300) continue;
    const Tensor x = test::leaf(test::rnd(k.shape, ++seed, DType::f64, k.format));
    test::check_gradcheck([&](const std::vector<Tensor>& in) { return max(in[0], k.dims[0], k.keepdim); }, {x},
                          label(k) + " max");
  }
}

TEST_CASE("the backward takes a gradient in either format") {
  // A 4-D keepdim result whose two formats differ (reduced over N), seeded in the other format.
  const Tensor x64 = test::rnd({3, 4, 2, 5}, 10), seed64 = test::rnd({1, 4, 2, 5}, 11);
  for (MemoryFormat f : {kNCHW, kNHWC}) {
    const MemoryFormat other = f == kNCHW ? kNHWC : kNCHW;
    for (Red r : {Red::sum, Red::mean, Red::max}) {
      const Case k{x64.shape(), {0}, true, f};
      const Tensor x = test::leaf(x64.to(f)), xr = test::leaf(x64);
      run(r, x, k).backward(seed64.to(other));
      run(r, xr, Case{x64.shape(), {0}, true, kNCHW}).backward(seed64);
      CHECK(x.grad().format() == f);
      test::check_close(x.grad(), xr.grad(), test::kTolF64, label(k));
    }
  }
}

TEST_CASE("sum, mean, max and argmax over dims open profiler scopes with their cost") {
  const Tensor x = test::leaf(test::rnd({3, 4, 5}, 1));
  for (const char* name : {"sum", "mean", "max", "argmax"}) {
    const std::vector<prof::Event> ev = op_events(
        [&] {
          const std::string n = name;
          if (n == "argmax") argmax(x, 1);
          else (n == "sum" ? sum(x, {1, 2}) : n == "mean" ? mean(x, {0}) : max(x, 1)).backward(
                   Tensor::full(n == "sum" ? Shape{3} : n == "mean" ? Shape{4, 5} : Shape{3, 5}, 1.0, DType::f64));
        },
        name);
    CAPTURE(name);
    REQUIRE(ev.size() == (std::string(name) == "argmax" ? 1u : 2u));
    CHECK(ev[0].cost.flops == 60);
    CHECK(ev[0].cost.bytes > 0);
  }
}

TEST_CASE("reductions over dims reject bad arguments with clear messages") {
  const Tensor x = test::rnd({2, 3}, 1);
  CHECK_THROWS_WITH_AS(sum(x, {}), doctest::Contains("dims is empty"), Error);
  CHECK_THROWS_WITH_AS(sum(x, {1, -1}), doctest::Contains("appears more than once"), Error);
  CHECK_THROWS_WITH_AS(mean(x, {2}), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(max(x, -3), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(sum(Tensor::zeros({2}, DType::i64), {0}), doctest::Contains("sum"), Error);
  CHECK_THROWS_WITH_AS(max(Tensor(), 0), doctest::Contains("max"), Error);
}

}  // namespace
}  // namespace rt
