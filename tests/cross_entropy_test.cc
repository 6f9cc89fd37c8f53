// cross_entropy: forward against a log-sum-exp reference in double with PyTorch's label
// smoothing, large logits, gradients by gradcheck in f64 (the i64 target never requires
// grad).
#include <algorithm>
#include <cmath>

#include "engine/ops.h"
#include "tests/test_util.h"

namespace rt {
namespace {

// loss_i = (1 - e) * nll_i + e * mean_k(-log p_ik), mean over rows; log p_ik = z_ik - lse_i.
double reference(const std::vector<double>& z, const std::vector<int64_t>& t, int64_t N, int64_t K, double e) {
  double total = 0;
  for (int64_t i = 0; i < N; ++i) {
    const double* row = z.data() + i * K;
    const double mx = *std::max_element(row, row + K);
    double se = 0;
    for (int64_t k = 0; k < K; ++k) se += std::exp(row[k] - mx);
    const double lse = mx + std::log(se);
    const double nll = -(row[t[size_t(i)]] - lse);
    double smooth = 0;
    for (int64_t k = 0; k < K; ++k) smooth += -(row[k] - lse);
    smooth /= double(K);
    total += (1 - e) * nll + e * smooth;
  }
  return total / double(N);
}

Tensor targets(const std::vector<int64_t>& t) { return Tensor::from_vector(t, {int64_t(t.size())}); }

std::vector<int64_t> random_targets(int64_t N, int64_t K, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> t(static_cast<size_t>(N));
  for (auto& v : t) v = g.randint(0, K);
  return t;
}

struct Case {
  int64_t N, K;
};
const std::vector<Case> kCases = {{4, 5}, {1, 3}, {7, 10}, {3, 1}, {16, 100}, {2, 2}};

TEST_CASE("cross_entropy forward matches log-sum-exp with label smoothing") {
  for (size_t ci = 0; ci < kCases.size(); ++ci) {
    const Case& k = kCases[ci];
    const Tensor z = test::rnd({k.N, k.K}, 10 + ci);
    const std::vector<int64_t> t = random_targets(k.N, k.K, 20 + ci);
    for (DType dt : {DType::f64, DType::f32})
      for (double e : {0.0, 0.1, 0.5, 1.0}) {
        const double want = reference(z.to(dt).to_vector<double>(), t, k.N, k.K, e);
        const Tensor y = cross_entropy(z.to(dt), targets(t), e);
        CHECK(y.ndim() == 0);
        CHECK(y.dtype() == dt);
        test::check_close(y, {want}, test::tol_for(dt), detail::cat("case ", ci, " ", dtype_name(dt), " e ", e));
      }
  }
}

TEST_CASE("cross_entropy by hand") {
  // Equal logits: p = 1/K everywhere, so every term is log K whatever the smoothing.
  for (double e : {0.0, 0.1, 1.0})
    test::check_close(cross_entropy(Tensor::zeros({3, 4}, DType::f64), targets({0, 3, 1}), e), {std::log(4.0)},
                      test::kTolF64, detail::cat("uniform, e ", e));
  // One row [0, ln 3]: p = [1/4, 3/4]. Target 1: nll = ln(4/3); mean_k(-log p) = (ln 4 + ln(4/3)) / 2.
  const Tensor z = Tensor::from_vector(std::vector<double>{0, std::log(3.0)}, {1, 2});
  const double nll = std::log(4.0 / 3.0), smooth = (std::log(4.0) + nll) / 2;
  test::check_close(cross_entropy(z, targets({1}), 0.0), {nll}, test::kTolF64, "nll");
  test::check_close(cross_entropy(z, targets({1}), 0.2), {0.8 * nll + 0.2 * smooth}, test::kTolF64, "smoothed");
}

TEST_CASE("cross_entropy stays finite for large logits") {
  // exp(1000) overflows even a double: only a max-shifted log-sum-exp survives.
  const std::vector<double> zv = {1000, 0, -1000, 2000, 2001, 1999, -3000, -3001, -2999.5, 1e4, 1e4, -1e4};
  const Tensor z = Tensor::from_vector(zv, {4, 3});
  const std::vector<int64_t> t = {2, 1, 0, 2};
  for (DType dt : {DType::f64, DType::f32})
    for (double e : {0.0, 0.1}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(e);
      const Tensor zl = test::leaf(z.to(dt));
      const Tensor y = cross_entropy(zl, targets(t), e);
      REQUIRE(std::isfinite(y.item()));
      test::check_close(y, {reference(z.to(dt).to_vector<double>(), t, 4, 3, e)}, test::tol_for(dt), "loss");
      y.backward();
      for (double g : zl.grad().to_vector<double>()) CHECK(std::isfinite(g));
    }
}

TEST_CASE("cross_entropy gradients pass gradcheck") {
  for (size_t ci = 0; ci < kCases.size(); ++ci) {
    const Case& k = kCases[ci];
    if (k.N * k.K > 200) continue;  // gradcheck is quadratic; the small cases cover the formula
    const Tensor t = targets(random_targets(k.N, k.K, 30 + ci));
    for (double e : {0.0, 0.1}) {
      // Logits spread like a trained network's (std 3), not just near zero.
      Generator g(40 + ci);
      const Tensor z = test::leaf(randn({k.N, k.K}, g, DType::f64, Device::cpu(), MemoryFormat::contiguous, 0.0, 3.0));
      // The target is captured, not an input: an i64 tensor never requires grad.
      test::check_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, e); }, {z},
                            detail::cat("case ", ci, " e ", e));
      CHECK_FALSE(t.requires_grad());
      CHECK_FALSE(t.grad().defined());
    }
  }
}

TEST_CASE("cross_entropy gradient is (softmax - smoothed one-hot) / N") {
  const int64_t N = 3, K = 4;
  const double e = 0.1;
  const Tensor z = test::leaf(test::rnd({N, K}, 5));
  const std::vector<int64_t> t = {2, 0, 3};
  cross_entropy(z, targets(t), e).backward();
  const std::vector<double> zv = z.to_vector<double>();
  std::vector<double> want(size_t(N * K));
  for (int64_t i = 0; i < N; ++i) {
    double se = 0;
    for (int64_t k = 0; k < K; ++k) se += std::exp(zv[size_t(i * K + k)]);
    for (int64_t k = 0; k < K; ++k) {
      const double p = std::exp(zv[size_t(i * K + k)]) / se;
      const double q = (k == t[size_t(i)] ? 1 - e : 0) + e / double(K);
      want[size_t(i * K + k)] = (p - q) / double(N);
    }
  }
  test::check_close(z.grad(), want, test::kTolF64, "dlogits");
}

TEST_CASE("cross_entropy rejects bad arguments with clear messages") {
  const Tensor z = test::rnd({3, 4}, 1);
  CHECK_THROWS_WITH_AS(cross_entropy(z, targets({0, 1, 4})), doctest::Contains("target 4 at row 2"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(z, targets({0, -1, 2})), doctest::Contains("target -1 at row 1"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(z, targets({0, 1})), doctest::Contains("3 rows of logits but 2 targets"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(z, Tensor::from_vector(std::vector<int32_t>{0, 1, 2}, {3})),
                       doctest::Contains("must be i64"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(z, Tensor::from_vector(std::vector<double>{0, 1, 2}, {3})),
                       doctest::Contains("must be i64"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(z, targets({0, 1, 2}), -0.1), doctest::Contains("label_smoothing must be in [0, 1]"),
                       Error);
  CHECK_THROWS_WITH_AS(cross_entropy(z, targets({0, 1, 2}), 1.5), doctest::Contains("label_smoothing must be in [0, 1]"),
                       Error);
  CHECK_THROWS_AS(cross_entropy(test::rnd({4}, 1), targets({0, 1, 2, 3})), Error);
  CHECK_THROWS_AS(cross_entropy(z, Tensor::from_vector(std::vector<int64_t>{0, 1, 2}, {3, 1})), Error);
  CHECK_THROWS_AS(cross_entropy(Tensor::zeros({3, 4}, DType::i64), targets({0, 1, 2})), Error);
  // An i64 target cannot be marked as requiring grad.
  Tensor t = targets({0, 1, 2});
  CHECK_THROWS_AS(t.set_requires_grad(true), Error);
}

}  // namespace
}  // namespace rt
