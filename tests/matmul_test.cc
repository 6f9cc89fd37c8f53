// matmul: forward against the triple loop in double on seeded random shapes (2-D and
// batched 3-D, sizes 1 and odd, K = 0, batches of small products (the parallel path) and
// large ones); f32 against the f64 reference with a sqrt(K) bound; gradients by gradcheck
// in f64; only the needed gradients; the error messages.
#include <cmath>

#include "engine/ops.h"
#include "engine/profiler.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::op_events;

struct Case {
  int64_t B, M, K, N;  // B = 0: 2-D
};

std::vector<double> reference(const Case& k, const std::vector<double>& a, const std::vector<double>& b) {
  const int64_t B = std::max<int64_t>(k.B, 1);
  std::vector<double> c(size_t(B * k.M * k.N), 0.0);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t m = 0; m < k.M; ++m)
      for (int64_t n = 0; n < k.N; ++n) {
        double s = 0;
        for (int64_t q = 0; q < k.K; ++q) s += a[size_t((i * k.M + m) * k.K + q)] * b[size_t((i * k.K + q) * k.N + n)];
        c[size_t((i * k.M + m) * k.N + n)] = s;
      }
  return c;
}

Shape a_shape(const Case& k) { return k.B ? Shape{k.B, k.M, k.K} : Shape{k.M, k.K}; }
Shape b_shape(const Case& k) { return k.B ? Shape{k.B, k.K, k.N} : Shape{k.K, k.N}; }
Shape c_shape(const Case& k) { return k.B ? Shape{k.B, k.M, k.N} : Shape{k.M, k.N}; }

std::string label(const Case& k) { return detail::cat("B", k.B, " M", k.M, " K", k.K, " N", k.N); }

// Fixed cases (vectors, batch 1, sizes past Eigen's register blocks, a batch of products
// large enough to run one at a time) plus seeded random ones.
std::vector<Case> cases() {
  std::vector<Case> cs = {{0, 1, 1, 1}, {0, 4, 7, 5},   {0, 1, 9, 1},    {0, 9, 1, 9},   {0, 33, 65, 17},
                          {1, 3, 4, 5}, {5, 2, 3, 4},   {7, 1, 6, 1},    {3, 17, 9, 31}, {2, 64, 40, 33},
                          {0, 3, 0, 4}, {2, 3, 0, 4}};  // K = 0: zeros
  Generator g(31);
  const int64_t sizes[] = {1, 2, 3, 5, 8, 13, 21};
  for (int c = 0; c < 30; ++c)
    cs.push_back({g.randint(0, 2) ? g.randint(1, 6) : 0, sizes[g.randint(0, 7)], sizes[g.randint(0, 7)],
                  sizes[g.randint(0, 7)]});
  return cs;
}

TEST_CASE("matmul matches the triple loop (f64), and f32 the f64 result within sqrt(K) rounding") {
  uint64_t seed = 100;
  for (const Case& k : cases()) {
    CAPTURE(label(k));
    const Tensor a = test::rnd(a_shape(k), ++seed), b = test::rnd(b_shape(k), ++seed);
    const std::vector<double> want = reference(k, a.to_vector<double>(), b.to_vector<double>());
    const Tensor c = matmul(a, b);
    CHECK(c.shape() == c_shape(k));
    test::check_close(c, want, test::kTolF64, label(k) + " f64");
    // f32: inputs rounded (2^-24 each) and products summed in f32 by Eigen: the error of a
    // dot product of K unit normals stays well within 1e-6 sqrt(K) (measured ~1e-7 sqrt(K)).
    const Tensor c32 = matmul(a.to(DType::f32), b.to(DType::f32));
    CHECK(c32.dtype() == DType::f32);
    test::check_close(c32, want, test::Tol{1e-6 * std::sqrt(double(std::max<int64_t>(k.K, 1))), 1e-6},
                      label(k) + " f32 vs f64");
  }
}

TEST_CASE("matmul by hand") {
  const Tensor a = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::from_vector(std::vector<double>{1, 0, 0, 1, 2, -1}, {3, 2});
  test::check_close(matmul(a, b), {7, -1, 16, -1}, test::kTolF64, "2x3 * 3x2");
}

TEST_CASE("matmul reads a batch slice (a view with an offset)") {
  const Tensor all = test::rnd({6, 3, 4}, 1), b = test::rnd({2, 4, 5}, 2);
  const Tensor a = all.slice_batch(3, 5);
  test::check_close(matmul(a, b), reference({2, 3, 4, 5}, a.to_vector<double>(), b.to_vector<double>()),
                    test::kTolF64, "slice");
}

TEST_CASE("matmul passes gradcheck (2-D and batched)") {
  uint64_t seed = 200;
  for (const Case& k : std::vector<Case>{{0, 3, 4, 5}, {0, 1, 6, 1}, {0, 5, 1, 3}, {3, 2, 3, 4}, {1, 4, 2, 3},
                                         {2, 1, 5, 2}}) {
    const Tensor a = test::leaf(test::rnd(a_shape(k), ++seed)), b = test::leaf(test::rnd(b_shape(k), ++seed));
    test::check_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b}, label(k));
  }
}

TEST_CASE("matmul computes only the gradients that are needed") {
  const Tensor a = test::rnd({3, 4}, 1), b = test::leaf(test::rnd({4, 2}, 2));
  sum(matmul(a, b)).backward();
  CHECK(b.grad().defined());
  // d sum(c) / db[q, n] = sum_m a[m, q].
  const std::vector<double> av = a.to_vector<double>();
  std::vector<double> want(8);
  for (int q = 0; q < 4; ++q)
    for (int n = 0; n < 2; ++n) want[size_t(q * 2 + n)] = av[size_t(q)] + av[size_t(4 + q)] + av[size_t(8 + q)];
  test::check_close(b.grad(), want, test::kTolF64, "db");
  const Tensor a2 = test::leaf(test::rnd({3, 4}, 3)), b2 = test::rnd({4, 2}, 4);
  sum(matmul(a2, b2)).backward();
  CHECK(a2.grad().defined());
  CHECK_FALSE(b2.grad().defined());
}

TEST_CASE("matmul opens a profiler scope with its cost, forward and backward") {
  const Tensor a = test::leaf(test::rnd({2, 3, 4}, 1)), b = test::leaf(test::rnd({2, 4, 5}, 2));
  const std::vector<prof::Event> ev = op_events([&] { sum(matmul(a, b)).backward(); }, "matmul");
  REQUIRE(ev.size() == 2);
  for (const prof::Event& e : ev) {
    CHECK(e.cost.flops == (e.backward ? 4.0 : 2.0) * 2 * 3 * 4 * 5);
    CHECK(e.cost.bytes > 0);
  }
}

TEST_CASE("matmul rejects bad arguments with clear messages") {
  const Tensor a = test::rnd({3, 4}, 1);
  CHECK_THROWS_WITH_AS(matmul(a, test::rnd({5, 2}, 2)), doctest::Contains("has 4 columns but b"), Error);
  CHECK_THROWS_WITH_AS(matmul(a, test::rnd({2, 4, 2}, 2)), doctest::Contains("expected (M, K) x (K, N)"), Error);
  CHECK_THROWS_WITH_AS(matmul(test::rnd({2, 3, 4}, 1), test::rnd({3, 4, 2}, 2)),
                       doctest::Contains("batch sizes differ"), Error);
  CHECK_THROWS_WITH_AS(matmul(test::rnd({4}, 1), test::rnd({4}, 2)), doctest::Contains("expected"), Error);
  CHECK_THROWS_WITH_AS(matmul(a, test::rnd({4, 2}, 2).to(DType::f32)), doctest::Contains("matmul"), Error);
}

}  // namespace
}  // namespace rt
