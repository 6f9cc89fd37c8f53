// The copying shape ops (permute, contiguous, narrow, split, concat) and the differentiable
// view: values against index arithmetic on the logical order (exact: values only move), on
// seeded random shapes (ranks 1-5, size-1 dims, both formats for 4-D, f64, f32 and i64), the
// result's shape and format, gradients by gradcheck in f64 (gradients in either format
// accepted), and the error messages.
#include <algorithm>
#include <numeric>

#include "engine/ops.h"
#include "engine/profiler.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::op_events;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;
using test::kExact;

// Row-major strides of a logical shape.
std::vector<int64_t> row_major(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t a = 1;
  for (size_t d = s.size(); d-- > 0;) st[d] = a, a *= s[d];
  return st;
}

// Calls f(index) for every logical index of s in row-major order.
template <typename F>
void for_each_index(const Shape& s, F&& f) {
  std::vector<int64_t> idx(s.size(), 0);
  const int64_t n = shape_numel(s);
  for (int64_t i = 0; i < n; ++i) {
    f(idx);
    for (size_t d = s.size(); d-- > 0 && ++idx[d] == s[d];) idx[d] = 0;
  }
}

Shape random_shape(Generator& g, int min_rank = 1) {
  const int64_t sizes[] = {1, 2, 3, 4, 5, 7};
  Shape s;
  const int n = int(g.randint(min_rank, 6));
  for (int d = 0; d < n; ++d) s.push_back(sizes[g.randint(0, 6)]);
  return s;
}

MemoryFormat random_format(Generator& g, const Shape& s) {
  return s.size() == 4 && g.randint(0, 2) == 1 ? kNHWC : kNCHW;
}

// A tensor of dtype t holding 0, 1, 2, ... (i64) or random normals (floating) in format f.
Tensor values(const Shape& s, DType t, MemoryFormat f, uint64_t seed) {
  if (t == DType::i64) {
    std::vector<int64_t> v(size_t(shape_numel(s)));
    std::iota(v.begin(), v.end(), int64_t(0));
    const Tensor x = Tensor::from_vector(v, s);
    return s.size() == 4 ? x.to(f) : x;
  }
  return test::rnd(s, seed, t, f);
}

// ---- permute -----------------------------------------------------------------------------

TEST_CASE("permute moves every element to its permuted index (random shapes and orders)") {
  Generator g(21);
  for (int c = 0; c < 80; ++c) {
    const Shape s = random_shape(g);
    const int n = int(s.size());
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    for (int k = n - 1; k > 0; --k) std::swap(order[size_t(k)], order[size_t(g.randint(0, k + 1))]);
    const MemoryFormat f = random_format(g, s);
    const DType t = c % 3 == 0 ? DType::i64 : c % 3 == 1 ? DType::f64 : DType::f32;
    const Tensor x = values(s, t, f, 100 + uint64_t(c));
    std::vector<int> given = order;
    for (int& d : given)
      if (g.randint(0, 2) == 1) d -= n;  // negative dims too
    const Tensor y = permute(x, given);
    Shape ys(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) ys[size_t(k)] = s[size_t(order[size_t(k)])];
    CAPTURE(shape_str(s));
    REQUIRE(y.shape() == ys);
    CHECK(y.dtype() == t);
    CHECK(y.format() == kNCHW);
    const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
    const std::vector<int64_t> xst = row_major(s);
    std::vector<double> want;
    for_each_index(ys, [&](const std::vector<int64_t>& idx) {
      int64_t at = 0;
      for (int k = 0; k < n; ++k) at += idx[size_t(k)] * xst[size_t(order[size_t(k)])];
      want.push_back(xv[size_t(at)]);
    });
    test::check_close(yv, want, kExact, "permute " + shape_str(s));
  }
}

TEST_CASE("permute of NCHW to (N, H, W, C) is the NHWC memory of x") {
  const Tensor x = test::rnd({2, 3, 4, 5}, 1);
  const Tensor y = permute(x, {0, 2, 3, 1});
  const Tensor nhwc = x.to(kNHWC);
  const double* p = nhwc.data<double>();
  test::check_close(y, std::vector<double>(p, p + nhwc.numel()), kExact, "NHWC memory");
  CHECK(permute(x, {0, 1, 2, 3}).same(x));  // the identity of a contiguous x: x itself
  CHECK(permute(nhwc, {0, 1, 2, 3}).format() == kNCHW);
}

TEST_CASE("permute passes gradcheck (both formats)") {
  Generator g(22);
  for (int c = 0; c < 12; ++c) {
    const Shape s = random_shape(g, 2);
    std::vector<int> order(s.size());
    std::iota(order.begin(), order.end(), 0);
    std::reverse(order.begin(), order.end());
    if (c % 2) std::rotate(order.begin(), order.begin() + 1, order.end());
    const MemoryFormat f = random_format(g, s);
    const Tensor x = test::leaf(test::rnd(s, 200 + uint64_t(c), DType::f64, f));
    test::check_gradcheck([&](const std::vector<Tensor>& in) { return permute(in[0], order); }, {x},
                          "permute " + shape_str(s));
    CHECK(x.grad().format() == f);
  }
}

// ---- contiguous and view -----------------------------------------------------------------

TEST_CASE("contiguous: NHWC -> NCHW with the same values, differentiable; x itself otherwise") {
  const Tensor x64 = test::rnd({2, 3, 4, 5}, 2);
  const Tensor x = test::leaf(x64.to(kNHWC));
  const Tensor y = contiguous(x);
  CHECK(y.format() == kNCHW);
  test::check_close(y, x64.to_vector<double>(), kExact, "values");
  test::check_gradcheck([](const std::vector<Tensor>& in) { return contiguous(in[0]); }, {x}, "gradcheck");
  CHECK(x.grad().format() == kNHWC);
  const Tensor c = test::rnd({3, 4}, 3);
  CHECK(contiguous(c).same(c));
}

TEST_CASE("view: a differentiable view that never copies") {
  const Tensor x = test::leaf(test::rnd({2, 3, 4}, 4));
  const Tensor y = view(x, {6, -1});
  CHECK(y.shape() == Shape{6, 4});
  CHECK(y.raw_data() == x.raw_data());
  test::check_gradcheck([](const std::vector<Tensor>& in) { return view(in[0], {4, 6}); }, {x}, "gradcheck");
  // channels_last: only a 1x1 image views; anything else refuses (reshape would copy).
  const Tensor p = test::rnd({2, 5, 1, 1}, 5, DType::f64, kNHWC);
  CHECK(view(p, {2, 5}).raw_data() == p.raw_data());
  CHECK_THROWS_WITH_AS(view(test::rnd({2, 3, 2, 2}, 6, DType::f64, kNHWC), {2, 12}),
                       doctest::Contains("would reorder elements"), Error);
}

TEST_CASE("reshape of an NHWC tensor (a copy) passes gradcheck") {
  const Tensor x = test::leaf(test::rnd({2, 3, 2, 2}, 7, DType::f64, kNHWC));
  test::check_gradcheck([](const std::vector<Tensor>& in) { return reshape(in[0], {6, 4}); }, {x}, "reshape");
}

// ---- narrow, split, concat -----------------------------------------------------------------

// Elements of x (logical values xv, shape s) with index `start <= idx[d] < start + len`.
std::vector<double> slice_ref(const std::vector<double>& xv, const Shape& s, int d, int64_t start, int64_t len) {
  std::vector<double> out;
  size_t i = 0;
  for_each_index(s, [&](const std::vector<int64_t>& idx) {
    if (idx[size_t(d)] >= start && idx[size_t(d)] < start + len) out.push_back(xv[i]);
    ++i;
  });
  return out;
}

TEST_CASE("split into random pieces, then concat back: exact, formats kept (random shapes)") {
  Generator g(23);
  for (int c = 0; c < 60; ++c) {
    const Shape s = random_shape(g);
    const int n = int(s.size());
    const int d = int(g.randint(0, n));
    const MemoryFormat f = random_format(g, s);
    const DType t = c % 3 == 0 ? DType::i64 : c % 3 == 1 ? DType::f64 : DType::f32;
    const Tensor x = values(s, t, f, 300 + uint64_t(c));
    // Random sizes adding up to s[d], zero-size pieces included.
    std::vector<int64_t> sizes;
    int64_t left = s[size_t(d)];
    while (left > 0) {
      const int64_t k = g.randint(0, left + 1);
      sizes.push_back(k);
      left -= k;
    }
    if (g.randint(0, 2) == 1) sizes.push_back(0);
    CAPTURE(shape_str(s));
    CAPTURE(d);
    const std::vector<Tensor> pieces = split(x, sizes, d - (g.randint(0, 2) == 1 ? n : 0));
    REQUIRE(pieces.size() == sizes.size());
    const std::vector<double> xv = x.to_vector<double>();
    int64_t start = 0;
    for (size_t p = 0; p < pieces.size(); ++p) {
      Shape ps = s;
      ps[size_t(d)] = sizes[p];
      CHECK(pieces[p].shape() == ps);
      CHECK(pieces[p].format() == (n == 4 ? f : kNCHW));
      test::check_close(pieces[p], slice_ref(xv, s, d, start, sizes[p]), kExact, "piece");
      start += sizes[p];
    }
    const Tensor back = concat(pieces, d);
    CHECK(back.shape() == s);
    CHECK(back.format() == f);  // all pieces share x's format
    test::check_close(back, xv, kExact, "concat");
  }
}

TEST_CASE("concat of mixed formats is contiguous; of channels_last inputs channels_last") {
  const Tensor a = test::rnd({2, 3, 4, 5}, 8), b = test::rnd({2, 2, 4, 5}, 9);
  const Tensor ab = concat({a, b.to(kNHWC)}, 1);
  CHECK(ab.format() == kNCHW);
  CHECK(concat({a.to(kNHWC), b.to(kNHWC)}, 1).format() == kNHWC);
  std::vector<double> want;
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  for (int n = 0; n < 2; ++n) {
    want.insert(want.end(), av.begin() + n * 60, av.begin() + (n + 1) * 60);
    want.insert(want.end(), bv.begin() + n * 40, bv.begin() + (n + 1) * 40);
  }
  test::check_close(ab, want, kExact, "values");
  test::check_close(concat({a.to(kNHWC), b.to(kNHWC)}, 1), want, kExact, "NHWC values");
}

TEST_CASE("narrow, split and concat pass gradcheck (both formats)") {
  Generator g(24);
  for (int c = 0; c < 10; ++c) {
    const Shape s = random_shape(g, 2);
    const int n = int(s.size());
    const int d = int(g.randint(0, n));
    const MemoryFormat f = random_format(g, s);
    const Tensor x = test::leaf(test::rnd(s, 400 + uint64_t(c), DType::f64, f));
    const int64_t len = s[size_t(d)];
    const std::string what = shape_str(s) + " dim " + std::to_string(d);
    test::check_gradcheck([&](const std::vector<Tensor>& in) { return narrow(in[0], d, len / 2, len - len / 2); },
                          {x}, "narrow " + what);
    CHECK(x.grad().format() == f);
    // Pieces reordered and joined: every piece's backward, and concat's, at once.
    test::check_gradcheck(
        [&](const std::vector<Tensor>& in) {
          const std::vector<Tensor> p = split(in[0], {len / 2, len - len / 2}, d);
          return concat({p[1], p[0]}, d);
        },
        {x}, "split + concat " + what);
    // Three inputs, one of them in the other format, one without grad.
    Shape s2 = s;
    s2[size_t(d)] = 2;
    const Tensor y = test::leaf(test::rnd(s2, 500 + uint64_t(c), DType::f64, n == 4 ? kNHWC : kNCHW));
    const Tensor z = test::rnd(s, 600 + uint64_t(c));
    test::check_gradcheck([&](const std::vector<Tensor>& in) { return concat({in[0], z, in[1]}, d); }, {x, y},
                          "concat " + what);
  }
}

TEST_CASE("shape ops accept a gradient in either format") {
  const Tensor x64 = test::rnd({2, 3, 4, 5}, 10), seed = test::rnd({2, 3, 4, 3}, 11);
  for (MemoryFormat f : {kNCHW, kNHWC}) {
    const Tensor x = test::leaf(x64.to(f)), xr = test::leaf(x64);
    narrow(x, 3, 1, 3).backward(seed.to(f == kNCHW ? kNHWC : kNCHW));
    narrow(xr, 3, 1, 3).backward(seed);
    CHECK(x.grad().format() == f);
    test::check_close(x.grad(), xr.grad(), kExact, "narrow");
  }
}

TEST_CASE("a copy that stays above 8 dims after merging is refused (the kernels' limit)") {
  const Shape s(9, 2);
  const Tensor x = Tensor::zeros(s, DType::f32);
  CHECK_THROWS_WITH_AS(permute(x, {8, 7, 6, 5, 4, 3, 2, 1, 0}), doctest::Contains("at most 8"), Error);
  CHECK(permute(x, {0, 1, 2, 3, 4, 5, 6, 8, 7}).shape() == s);  // merges to 3 dims
}

TEST_CASE("the shape ops open profiler scopes") {
  const Tensor x = test::leaf(test::rnd({2, 3, 4}, 1));
  const auto f = [&] {
    const std::vector<Tensor> p = split(x, {1, 2}, 1);
    sum(permute(concat({p[1], p[0]}, 1), {2, 0, 1})).backward();
    view(x, {6, 4});
    contiguous(x.to(DType::f64));
  };
  for (const char* name : {"split", "narrow", "concat", "permute", "view"}) {
    CAPTURE(name);
    CHECK_FALSE(op_events(f, name).empty());
  }
  const std::vector<prof::Event> ev = op_events(f, "permute");
  REQUIRE(ev.size() == 2);  // forward and backward
  CHECK(ev[0].cost.bytes == 2 * 24 * 8);
}

TEST_CASE("shape ops reject bad arguments with clear messages") {
  const Tensor x = test::rnd({2, 3, 4}, 1);
  CHECK_THROWS_WITH_AS(permute(x, {0, 1}), doctest::Contains("order has 2 dims"), Error);
  CHECK_THROWS_WITH_AS(permute(x, {0, 1, 1}), doctest::Contains("appears more than once"), Error);
  CHECK_THROWS_WITH_AS(permute(x, {0, 1, 3}), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(narrow(x, 1, 2, 2), doctest::Contains("is not within dim 1"), Error);
  CHECK_THROWS_WITH_AS(split(x, {1, 1}, 1), doctest::Contains("add up to 2"), Error);
  CHECK_THROWS_WITH_AS(split(x, {4, -1}, 1), doctest::Contains("negative size"), Error);
  CHECK_THROWS_WITH_AS(concat({}, 0), doctest::Contains("no tensors"), Error);
  CHECK_THROWS_WITH_AS(concat({x, test::rnd({2, 3, 5}, 2)}, 1), doctest::Contains("only dim 1 may differ"), Error);
  CHECK_THROWS_WITH_AS(concat({x, test::rnd({2, 3}, 2)}, 0), doctest::Contains("ranks differ"), Error);
  CHECK_THROWS_WITH_AS(concat({x, x.to(DType::f32)}, 0), doctest::Contains("concat"), Error);
}

}  // namespace
}  // namespace rt
