// batch_norm: forward against a per-channel reference in double (mean, biased variance,
// affine), the running-statistics update (unbiased variance), eval mode, every layout and
// rank; gradients by gradcheck in f64.
#include <algorithm>
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

// ---- the fused tails: batch_norm_relu, batch_norm_add_relu ----------------------------

MemoryFormat other(MemoryFormat f) {
  return f == MemoryFormat::contiguous ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

// The fused op (residual undefined: batch_norm_relu) ...
Tensor fused_op(const Tensor& x, const Tensor& r, const Tensor& w, const Tensor& b, Tensor rm, Tensor rv,
                bool training) {
  return r.defined() ? batch_norm_add_relu(x, r, w, b, rm, rv, training) : batch_norm_relu(x, w, b, rm, rv, training);
}
// ... and the same composed from the unfused ops.
Tensor composed_op(const Tensor& x, const Tensor& r, const Tensor& w, const Tensor& b, Tensor rm, Tensor rv,
                   bool training) {
  const Tensor y = batch_norm(x, w, b, rm, rv, training);
  return r.defined() ? add_relu(y, r) : relu(y);
}

TEST_CASE("batch_norm_relu and batch_norm_add_relu equal the composed ops: values, gradients, running stats") {
  const std::vector<Shape> shapes = {
      {2, 3, 5, 7},     // odd spatial sizes
      {1, 4, 3, 5},     // batch 1, spatial > 1
      {3, 5, 1, 1},     // 1x1 images
      {5, 3},           // (N, C)
      {3, 2, 4},        // (N, C, L)
      {4, 37, 3, 5},    // odd channel count
      {8, 16, 12, 12},  // the kernels' multi-threaded paths
  };
  uint64_t seed = 1000;
  for (const Shape& s : shapes) {
    const Dims d = dims_of(s);
    for (DType dt : {DType::f64, DType::f32})
      for (MemoryFormat f : formats_for(s))
        for (bool training : {true, false})
          for (bool affine : {true, false})
            for (int res : {0, 1, 2}) {  // none; in x's format; in the other format (4-D only)
              if (res == 2 && s.size() != 4) continue;
              const std::string what =
                  detail::cat(res ? "batch_norm_add_relu" : "batch_norm_relu", " shape ", shape_str(s), " ",
                              dtype_name(dt), " ", fmt_name(f), training ? " training" : " eval",
                              affine ? " affine" : "", res == 2 ? " residual in the other format" : "");
              const Tensor x64 = test::rnd(s, ++seed), w64 = add(test::rnd({d.C}, ++seed), 0.5);
              const Tensor b64 = test::rnd({d.C}, ++seed), r64 = test::rnd(s, ++seed), g64 = test::rnd(s, ++seed);
              const Tensor rm0 = test::rnd({d.C}, ++seed).to(dt), rv0 = positive(d.C, ++seed, dt);
              struct Side {
                Tensor x, w, b, r, rm, rv, y;
              };
              auto make = [&]() {
                Side sd{test::leaf(x64.to(dt).to(f)), Tensor(), Tensor(), Tensor(), rm0.clone(), rv0.clone(), Tensor()};
                if (affine) sd.w = test::leaf(w64.to(dt)), sd.b = test::leaf(b64.to(dt));
                if (res) sd.r = test::leaf(r64.to(dt).to(res == 2 ? other(f) : f));
                return sd;
              };
              Side a = make(), c = make();
              a.y = fused_op(a.x, a.r, a.w, a.b, a.rm, a.rv, training);
              c.y = composed_op(c.x, c.r, c.w, c.b, c.rm, c.rv, training);
              CHECK(a.y.format() == f);
              CHECK(a.y.dtype() == dt);
              const test::Tol tol = test::tol_for(dt);
              test::check_close(a.y, c.y, tol, what + ": y");
              // Same statistics code on both sides: the running stats are bit for bit the same.
              CHECK_MESSAGE(a.rm.to_vector<double>() == c.rm.to_vector<double>(), what, ": running_mean");
              CHECK_MESSAGE(a.rv.to_vector<double>() == c.rv.to_vector<double>(), what, ": running_var");
              // The relu must have cut something and passed something.
              const std::vector<double> yv = a.y.to_vector<double>();
              CHECK(std::count(yv.begin(), yv.end(), 0.0) > 0);
              CHECK(std::count(yv.begin(), yv.end(), 0.0) < std::ptrdiff_t(yv.size()));

              const Tensor seed_grad = g64.to(dt).to(s.size() == 4 ? other(f) : f);  // also converts dy
              a.y.backward(seed_grad);
              c.y.backward(seed_grad);
              test::check_close(a.x.grad(), c.x.grad(), tol, what + ": dx");
              CHECK(a.x.grad().format() == f);
              if (affine) {
                test::check_close(a.w.grad(), c.w.grad(), tol, what + ": dweight");
                test::check_close(a.b.grad(), c.b.grad(), tol, what + ": dbias");
              }
              if (res) test::check_close(a.r.grad(), c.r.grad(), tol, what + ": dresidual");
            }
  }
}

TEST_CASE("batch_norm_relu and batch_norm_add_relu match the per-channel definition") {
  // Against the reference directly, not only against the unfused ops.
  const Shape s{3, 4, 5, 3};
  const Dims d = dims_of(s);
  const Tensor x = test::rnd(s, 31), r = test::rnd(s, 32), w = test::rnd({4}, 33), b = test::rnd({4}, 34);
  for (DType dt : {DType::f64, DType::f32})
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      const std::vector<double> xv = x.to(dt).to_vector<double>(), rv = r.to(dt).to_vector<double>();
      const Stats st = reference_stats(xv, d);
      std::vector<double> want = reference_apply(xv, d, st.mean, st.var, w.to(dt).to_vector<double>(),
                                                 b.to(dt).to_vector<double>());
      std::vector<double> want_relu = want;
      for (size_t i = 0; i < want.size(); ++i) {
        want_relu[i] = std::max(want[i], 0.0);
        want[i] = std::max(want[i] + rv[i], 0.0);
      }
      const std::string what = detail::cat(dtype_name(dt), " ", fmt_name(f));
      test::check_close(batch_norm_relu(x.to(dt).to(f), w.to(dt), b.to(dt), Tensor(), Tensor(), true), want_relu,
                        test::tol_for(dt), "batch_norm_relu " + what);
      test::check_close(
          batch_norm_add_relu(x.to(dt).to(f), r.to(dt).to(f), w.to(dt), b.to(dt), Tensor(), Tensor(), true), want,
          test::tol_for(dt), "batch_norm_add_relu " + what);
    }
}

TEST_CASE("batch_norm_relu and batch_norm_add_relu pass gradcheck w.r.t. x, residual, weight, bias") {
  const std::vector<Shape> shapes = {{2, 3, 3, 4}, {1, 2, 3, 3}, {5, 3}, {2, 2, 5}};
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& s = shapes[si];
    const Dims d = dims_of(s);
    for (bool training : {true, false})
      for (MemoryFormat f : formats_for(s))
        for (bool with_res : {false, true})
          for (bool affine : {true, false}) {
            const Tensor x = test::leaf(test::rnd(s, 170 + si, DType::f64, f));
            const Tensor w = test::leaf(add(test::rnd({d.C}, 180 + si), 1.5));
            const Tensor b = test::leaf(test::rnd({d.C}, 190 + si));
            // The residual in the other layout for 4-D inputs: its gradient goes back converted.
            const Tensor r = test::leaf(test::rnd(s, 195 + si, DType::f64, s.size() == 4 ? other(f) : f));
            Tensor rm = test::rnd({d.C}, 197 + si), rv = positive(d.C, 198 + si);
            std::vector<Tensor> in{x};
            if (with_res) in.push_back(r);
            if (affine) in.insert(in.end(), {w, b});
            test::check_gradcheck(
                [&](const std::vector<Tensor>& v) {
                  const Tensor& vw = affine ? v[with_res ? 2 : 1] : Tensor();
                  const Tensor& vb = affine ? v[with_res ? 3 : 2] : Tensor();
                  return with_res ? batch_norm_add_relu(v[0], v[1], vw, vb, rm, rv, training)
                                  : batch_norm_relu(v[0], vw, vb, rm, rv, training);
                },
                in,
                detail::cat(with_res ? "batch_norm_add_relu" : "batch_norm_relu", " shape ", shape_str(s),
                            training ? " training " : " eval ", fmt_name(f), affine ? " affine" : " no affine"));
            CHECK(x.grad().format() == f);
            if (with_res) CHECK(r.grad().format() == r.format());
          }
  }
}

TEST_CASE("batch_norm_add_relu gives the residual its gradient when x needs none") {
  // dx not wanted: the backward writes the residual's gradient alone.
  const Shape s{2, 3, 4, 5};
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    const Tensor x = test::rnd(s, 41, DType::f64, f);
    const Tensor ra = test::leaf(test::rnd(s, 42, DType::f64, f)), rc = test::leaf(ra.detach());
    const Tensor g = test::rnd(s, 43, DType::f64, f);
    batch_norm_add_relu(x, ra, Tensor(), Tensor(), Tensor(), Tensor(), true).backward(g);
    add_relu(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true), rc).backward(g);
    CHECK(ra.grad().to_vector<double>() == rc.grad().to_vector<double>());
  }
}

TEST_CASE("batch_norm_relu propagates NaN like relu") {
  Tensor x = test::rnd({4, 2}, 51);
  Tensor rm = Tensor::zeros({2}, DType::f64), rv = Tensor::full({2}, 1.0, DType::f64);
  x.data<double>()[3] = std::nan("");
  const std::vector<double> y = batch_norm_relu(x, Tensor(), Tensor(), rm, rv, /*training=*/false).to_vector<double>();
  CHECK(std::isnan(y[3]));
  CHECK(!std::isnan(y[2]));
}

TEST_CASE("batch_norm_add_relu rejects bad residuals with clear messages") {
  const Tensor x = test::rnd({2, 3, 4, 4}, 1);
  CHECK_THROWS_WITH_AS(batch_norm_add_relu(x, test::rnd({2, 3, 4, 5}, 2), Tensor(), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("residual must have the input's shape"), Error);
  CHECK_THROWS_WITH_AS(batch_norm_add_relu(x, test::rnd({2, 3, 4, 4}, 2, DType::f32), Tensor(), Tensor(), Tensor(),
                                           Tensor(), true),
                       doctest::Contains("different dtypes"), Error);
  CHECK_THROWS_WITH_AS(batch_norm_add_relu(x, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("batch_norm_add_relu"), Error);
  CHECK_THROWS_WITH_AS(batch_norm_relu(x, test::rnd({4}, 4), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("batch_norm_relu: weight must be [3]"), Error);
}

}  // namespace
}  // namespace rt
