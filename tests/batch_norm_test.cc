// batch_norm: forward against a per-channel reference in double (mean, biased variance,
// affine), the running-statistics update (unbiased variance), eval mode, every layout and
// rank; gradients by gradcheck in f64.
#include <cmath>

#include "engine/ops.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::fmt_name;

constexpr double kEps = 1e-5;

// x (N, C, S...) in logical order: element (n, c, s) at (n*C + c)*S + s.
struct Dims {
  int64_t N, C, S;
};
Dims dims_of(const Shape& s) {
  int64_t S = 1;
  for (size_t i = 2; i < s.size(); ++i) S *= s[i];
  return {s[0], s[1], S};
}

struct Stats {
  std::vector<double> mean, var;  // var: biased (divides by N*S)
};

// Straight from the definition, two passes, in double.
Stats reference_stats(const std::vector<double>& x, Dims d) {
  Stats st{std::vector<double>(size_t(d.C), 0.0), std::vector<double>(size_t(d.C), 0.0)};
  const double M = double(d.N * d.S);
  for (int64_t c = 0; c < d.C; ++c) {
    double s = 0;
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.S; ++i) s += x[size_t((n * d.C + c) * d.S + i)];
    const double m = s / M;
    double v = 0;
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.S; ++i) {
        const double e = x[size_t((n * d.C + c) * d.S + i)] - m;
        v += e * e;
      }
    st.mean[size_t(c)] = m;
    st.var[size_t(c)] = v / M;
  }
  return st;
}

// y = (x - mean) / sqrt(var + eps) * w + b; w, b empty: affine off.
std::vector<double> reference_apply(const std::vector<double>& x, Dims d, const std::vector<double>& mean,
                                    const std::vector<double>& var, const std::vector<double>& w,
                                    const std::vector<double>& b) {
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t i = 0; i < d.S; ++i) {
        const size_t k = size_t((n * d.C + c) * d.S + i);
        double v = (x[k] - mean[size_t(c)]) / std::sqrt(var[size_t(c)] + kEps);
        if (!w.empty()) v = v * w[size_t(c)] + b[size_t(c)];
        y[k] = v;
      }
  return y;
}

std::vector<MemoryFormat> formats_for(const Shape& s) {
  if (s.size() == 4) return {MemoryFormat::contiguous, MemoryFormat::channels_last};
  return {MemoryFormat::contiguous};
}

// Positive values for a running variance.
Tensor positive(int64_t C, uint64_t seed, DType dt = DType::f64) {
  std::vector<double> v = test::rnd({C}, seed).to_vector<double>();
  for (double& e : v) e = std::abs(e) + 0.5;
  return Tensor::from_vector(v, {C}).to(dt);
}

const std::vector<Shape> kShapes = {
    {2, 3, 5, 7},  // odd spatial sizes
    {1, 4, 3, 5},  // batch 1, spatial > 1
    {3, 5, 1, 1},  // 1x1 images
    {5, 2, 3, 2},  // odd batch
    {4, 3, 2, 3},
    {8, 5},        // (N, C): BatchNorm1d after a linear layer
    {2, 3},
    {3, 2, 4},     // (N, C, L)
    {8, 16, 12, 12},  // large enough for the kernels' multi-threaded paths
};

TEST_CASE("batch_norm training forward matches the per-channel definition") {
  for (size_t si = 0; si < kShapes.size(); ++si) {
    const Shape& s = kShapes[si];
    const Dims d = dims_of(s);
    const Tensor x = test::rnd(s, 100 + si, DType::f64);
    const Tensor w = test::rnd({d.C}, 200 + si), b = test::rnd({d.C}, 300 + si);
    for (DType dt : {DType::f64, DType::f32}) {
      // The reference sees exactly the values the op sees (rounded to dt).
      const std::vector<double> xv = x.to(dt).to_vector<double>();
      const std::vector<double> wv = w.to(dt).to_vector<double>(), bv = b.to(dt).to_vector<double>();
      const Stats st = reference_stats(xv, d);
      for (MemoryFormat f : formats_for(s))
        for (bool affine : {true, false}) {
          const Tensor y = batch_norm(x.to(dt).to(f), affine ? w.to(dt) : Tensor(), affine ? b.to(dt) : Tensor(),
                                      Tensor(), Tensor(), /*training=*/true);
          CHECK(y.format() == f);
          CHECK(y.dtype() == dt);
          CHECK(y.shape() == s);
          test::check_close(y, reference_apply(xv, d, st.mean, st.var, affine ? wv : std::vector<double>(), bv),
                            test::tol_for(dt),
                            detail::cat("shape ", shape_str(s), " ", dtype_name(dt), " ", fmt_name(f),
                                        affine ? " affine" : " no affine"));
        }
    }
  }
}

TEST_CASE("batch_norm output has zero mean and unit variance per channel (affine off)") {
  // An independent sanity check of the normalisation itself, without the reference.
  const Shape s{3, 4, 5, 6};
  const Dims d = dims_of(s);
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    Generator g(7);
    const Tensor x = randn(s, g, DType::f64, Device::cpu(), f, /*mean=*/3.0, /*std=*/2.5);
    const std::vector<double> y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true).to_vector<double>();
    for (int64_t c = 0; c < d.C; ++c) {
      double s1 = 0, s2 = 0;
      for (int64_t n = 0; n < d.N; ++n)
        for (int64_t i = 0; i < d.S; ++i) {
          const double v = y[size_t((n * d.C + c) * d.S + i)];
          s1 += v;
          s2 += v * v;
        }
      const double M = double(d.N * d.S);
      CHECK(std::abs(s1 / M) < 1e-12);
      // var / (var + eps) rather than exactly 1.
      CHECK(std::abs(s2 / M - 1.0) < 1e-5);
    }
  }
}

TEST_CASE("batch_norm training updates the running statistics with the unbiased variance") {
  const std::vector<Shape> shapes = {{4, 3, 5, 6}, {6, 4}, {1, 2, 3, 3}};
  for (const Shape& s : shapes) {
    const Dims d = dims_of(s);
    const double M = double(d.N * d.S);
    for (DType xdt : {DType::f64, DType::f32})
      for (DType rdt : {DType::f64, DType::f32})  // running stats may be f32 while the input is f64
        for (double momentum : {0.1, 0.35})
          for (MemoryFormat f : formats_for(s)) {
            const std::string what = detail::cat("shape ", shape_str(s), " x ", dtype_name(xdt), " running ",
                                                 dtype_name(rdt), " momentum ", momentum, " ", fmt_name(f));
            const Tensor x = test::rnd(s, 11, DType::f64).to(xdt).to(f);
            const Stats st = reference_stats(x.to_vector<double>(), d);
            const Tensor rm0 = test::rnd({d.C}, 12).to(rdt), rv0 = positive(d.C, 13, rdt);
            Tensor rm = rm0.clone(), rv = rv0.clone();
            const Tensor y = batch_norm(x, Tensor(), Tensor(), rm, rv, /*training=*/true, momentum);
            CHECK(rm.dtype() == rdt);
            CHECK(rv.dtype() == rdt);

            std::vector<double> want_m(size_t(d.C)), want_v(size_t(d.C));
            const std::vector<double> m0 = rm0.to_vector<double>(), v0 = rv0.to_vector<double>();
            for (int64_t c = 0; c < d.C; ++c) {
              want_m[size_t(c)] = (1 - momentum) * m0[size_t(c)] + momentum * st.mean[size_t(c)];
              want_v[size_t(c)] = (1 - momentum) * v0[size_t(c)] + momentum * st.var[size_t(c)] * M / (M - 1);
            }
            const test::Tol tol = (xdt == DType::f64 && rdt == DType::f64) ? test::kTolF64 : test::kTolF32;
            test::check_close(rm, want_m, tol, what + ": running_mean");
            test::check_close(rv, want_v, tol, what + ": running_var");

            // Training normalises with the batch's statistics, never the running ones.
            test::check_close(y, reference_apply(x.to_vector<double>(), d, st.mean, st.var, {}, {}),
                              test::tol_for(xdt), what + ": output");

            // A second step blends again from the updated values.
            batch_norm(x, Tensor(), Tensor(), rm, rv, true, momentum);
            for (int64_t c = 0; c < d.C; ++c) {
              want_m[size_t(c)] = (1 - momentum) * want_m[size_t(c)] + momentum * st.mean[size_t(c)];
              want_v[size_t(c)] = (1 - momentum) * want_v[size_t(c)] + momentum * st.var[size_t(c)] * M / (M - 1);
            }
            test::check_close(rm, want_m, tol, what + ": running_mean after two steps");
            test::check_close(rv, want_v, tol, what + ": running_var after two steps");
          }
  }
}

TEST_CASE("batch_norm eval mode normalises with the running statistics and leaves them alone") {
  const std::vector<Shape> shapes = {{3, 4, 5, 5}, {1, 4, 1, 1}, {1, 4}, {5, 3}, {2, 3, 7}};  // N*S == 1 is fine in eval
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& s = shapes[si];
    const Dims d = dims_of(s);
    const Tensor x = test::rnd(s, 20 + si);
    const Tensor w = test::rnd({d.C}, 30 + si), b = test::rnd({d.C}, 40 + si);
    for (DType dt : {DType::f64, DType::f32})
      for (DType rdt : {DType::f64, DType::f32})
        for (MemoryFormat f : formats_for(s))
          for (bool affine : {true, false}) {
            const Tensor rm = test::rnd({d.C}, 50 + si).to(rdt), rv = positive(d.C, 60 + si, rdt);
            const std::vector<double> rm_before = rm.to_vector<double>(), rv_before = rv.to_vector<double>();
            const std::vector<double> xv = x.to(dt).to_vector<double>();
            const Tensor y = batch_norm(x.to(dt).to(f), affine ? w.to(dt) : Tensor(), affine ? b.to(dt) : Tensor(),
                                        rm, rv, /*training=*/false, /*momentum=*/0.5);
            CHECK(y.format() == f);
            const std::vector<double> want =
                reference_apply(xv, d, rm_before, rv_before, affine ? w.to(dt).to_vector<double>() : std::vector<double>(),
                                b.to(dt).to_vector<double>());
            const std::string what = detail::cat("shape ", shape_str(s), " ", dtype_name(dt), " running ",
                                                 dtype_name(rdt), " ", fmt_name(f), affine ? " affine" : " no affine");
            test::check_close(y, want, test::tol_for(dt), what);
            CHECK_MESSAGE(rm.to_vector<double>() == rm_before, what, ": eval changed running_mean");
            CHECK_MESSAGE(rv.to_vector<double>() == rv_before, what, ": eval changed running_var");
          }
  }
}

TEST_CASE("batch_norm gradients pass gradcheck in training and eval, every layout") {
  const std::vector<Shape> shapes = {{2, 3, 3, 4}, {1, 2, 3, 3}, {5, 3}, {2, 2, 5}};
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& s = shapes[si];
    const Dims d = dims_of(s);
    for (bool training : {true, false})
      for (MemoryFormat f : formats_for(s))
        for (bool affine : {true, false}) {
          const Tensor x = test::leaf(test::rnd(s, 70 + si, DType::f64, f));
          // Weights away from zero so that every path carries gradient.
          const Tensor w = test::leaf(add(test::rnd({d.C}, 80 + si), 1.5));
          const Tensor b = test::leaf(test::rnd({d.C}, 90 + si));
          Tensor rm = test::rnd({d.C}, 95 + si), rv = positive(d.C, 96 + si);
          test::check_gradcheck(
              [&](const std::vector<Tensor>& in) {
                return batch_norm(in[0], affine ? in[1] : Tensor(), affine ? in[2] : Tensor(), rm, rv, training);
              },
              affine ? std::vector<Tensor>{x, w, b} : std::vector<Tensor>{x},
              detail::cat("shape ", shape_str(s), training ? " training " : " eval ", fmt_name(f),
                          affine ? " affine" : " no affine"));
          CHECK(x.grad().format() == f);
          if (affine) {
            CHECK(w.grad().defined());
            CHECK(b.grad().defined());
          }
        }
  }
}

TEST_CASE("batch_norm backward converts an incoming gradient of the other format") {
  // add(c, bn(x)) takes c's format: batch_norm's backward gets its gradient in c's format.
  const Shape s{2, 3, 3, 4};
  for (bool training : {true, false})
    for (MemoryFormat fx : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      const MemoryFormat fc =
          fx == MemoryFormat::contiguous ? MemoryFormat::channels_last : MemoryFormat::contiguous;
      const Tensor x = test::leaf(test::rnd(s, 97, DType::f64, fx));
      const Tensor w = test::leaf(add(test::rnd({3}, 98), 1.5)), b = test::leaf(test::rnd({3}, 99));
      const Tensor c = test::leaf(test::rnd(s, 100, DType::f64, fc));
      Tensor rm = test::rnd({3}, 101), rv = positive(3, 102);
      test::check_gradcheck(
          [&](const std::vector<Tensor>& in) {
            return add(in[3], batch_norm(in[0], in[1], in[2], rm, rv, training));
          },
          {x, w, b, c}, detail::cat(training ? "training " : "eval ", "x ", fmt_name(fx), " gradient ", fmt_name(fc)));
    }
}

TEST_CASE("batch_norm computes only the gradients that are needed") {
  const Tensor x = test::rnd({3, 2, 4, 4}, 1);
  const Tensor w = test::leaf(test::rnd({2}, 2)), b = test::leaf(test::rnd({2}, 3));
  sum(square(batch_norm(x, w, b, Tensor(), Tensor(), true))).backward();
  CHECK(w.grad().defined());
  CHECK(b.grad().defined());
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("batch_norm rejects bad arguments with clear messages") {
  const Tensor x = test::rnd({2, 3, 4, 4}, 1);
  const Tensor rm = test::rnd({3}, 2), rv = positive(3, 3);
  CHECK_THROWS_WITH_AS(batch_norm(x, test::rnd({4}, 4), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("weight must be [3]"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, test::rnd({3}, 4), test::rnd({3, 1}, 5), Tensor(), Tensor(), true),
                       doctest::Contains("bias must be [3]"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor(), Tensor(), test::rnd({2}, 6), positive(2, 7), true),
                       doctest::Contains("running_mean must be [3]"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor(), Tensor(), rm, positive(4, 7), false),
                       doctest::Contains("running_var must be [3]"), Error);
  // One value per channel: the batch variance is undefined.
  CHECK_THROWS_WITH_AS(batch_norm(test::rnd({1, 3, 1, 1}, 8), Tensor(), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("more than one value per channel"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(test::rnd({1, 3}, 8), Tensor(), Tensor(), rm.clone(), rv.clone(), true),
                       doctest::Contains("more than one value per channel"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false),
                       doctest::Contains("eval mode needs running_mean and running_var"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor(), Tensor(), rm, Tensor(), true), doctest::Contains("go together"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, test::rnd({3}, 4, DType::f32), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("different dtypes"), Error);
  CHECK_THROWS_AS(batch_norm(test::rnd({6}, 9), Tensor(), Tensor(), Tensor(), Tensor(), true), Error);
  CHECK_THROWS_AS(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, /*eps=*/0.0), Error);
  // A rejected call must not have touched the running statistics.
  Tensor rm2 = rm.clone(), rv2 = rv.clone();
  CHECK_THROWS_AS(batch_norm(x, test::rnd({4}, 4), Tensor(), rm2, rv2, true), Error);
  CHECK(rm2.to_vector<double>() == rm.to_vector<double>());
  CHECK(rv2.to_vector<double>() == rv.to_vector<double>());
}

}  // namespace
}  // namespace rt
