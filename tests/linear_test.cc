// linear: forward against the triple loop y[n,o] = b[o] + sum_i x[n,i] w[o,i] in double;
// gradients by gradcheck in f64.
#include "engine/ops.h"
#include "tests/test_util.h"

namespace rt {
namespace {

struct Case {
  int64_t N, in, out;
  bool bias;
};

std::vector<double> reference(const Case& k, const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& b) {
  std::vector<double> y(size_t(k.N * k.out));
  for (int64_t n = 0; n < k.N; ++n)
    for (int64_t o = 0; o < k.out; ++o) {
      double s = k.bias ? b[size_t(o)] : 0.0;
      for (int64_t i = 0; i < k.in; ++i) s += x[size_t(n * k.in + i)] * w[size_t(o * k.in + i)];
      y[size_t(n * k.out + o)] = s;
    }
  return y;
}

const std::vector<Case> kCases = {
    {4, 7, 5, true},
    {4, 7, 5, false},
    {1, 6, 3, true},      // N = 1
    {1, 6, 3, false},
    {5, 1, 4, true},      // one input feature
    {3, 8, 1, true},      // one output
    {16, 64, 10, true},   // a classifier head
    {33, 130, 17, false}, // sizes past Eigen's register blocks
};

TEST_CASE("linear forward matches the definition") {
  for (size_t ci = 0; ci < kCases.size(); ++ci) {
    const Case& k = kCases[ci];
    const Tensor x = test::rnd({k.N, k.in}, 10 + ci), w = test::rnd({k.out, k.in}, 20 + ci), b = test::rnd({k.out}, 30 + ci);
    for (DType dt : {DType::f64, DType::f32}) {
      const std::vector<double> want = reference(k, x.to(dt).to_vector<double>(), w.to(dt).to_vector<double>(),
                                                 b.to(dt).to_vector<double>());
      const Tensor y = linear(x.to(dt), w.to(dt), k.bias ? b.to(dt) : Tensor());
      CHECK(y.shape() == Shape{k.N, k.out});
      CHECK(y.dtype() == dt);
      test::check_close(y, want, test::tol_for(dt), detail::cat("case ", ci, " ", dtype_name(dt)));
    }
  }
}

TEST_CASE("linear by hand") {
  // x = [[1, 2], [3, 4]], W = [[1, 0], [1, -1], [2, 1]], b = [0.5, 0, -1]
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  const Tensor w = Tensor::from_vector(std::vector<double>{1, 0, 1, -1, 2, 1}, {3, 2});
  const Tensor b = Tensor::from_vector(std::vector<double>{0.5, 0, -1}, {3});
  test::check_close(linear(x, w, b), {1.5, -1, 3, 3.5, -1, 9}, test::kTolF64, "with bias");
  test::check_close(linear(x, w, Tensor()), {1, -1, 4, 3, -1, 10}, test::kTolF64, "without bias");
}

TEST_CASE("linear reads a batch slice (a view with an offset)") {
  const Case k{3, 5, 4, true};
  const Tensor xall = test::rnd({6, 5}, 1), w = test::rnd({4, 5}, 2), b = test::rnd({4}, 3);
  const Tensor xs = xall.slice_batch(2, 5);
  test::check_close(linear(xs, w, b),
                    reference(k, xs.to_vector<double>(), w.to_vector<double>(), b.to_vector<double>()), test::kTolF64,
                    "slice");
}

TEST_CASE("linear gradients pass gradcheck") {
  for (size_t ci = 0; ci < kCases.size(); ++ci) {
    const Case& k = kCases[ci];
    if (k.in * k.out > 2000) continue;  // gradcheck is O(params * forward); the small cases cover the formulas
    const Tensor x = test::leaf(test::rnd({k.N, k.in}, 40 + ci));
    const Tensor w = test::leaf(test::rnd({k.out, k.in}, 50 + ci));
    const Tensor b = test::leaf(test::rnd({k.out}, 60 + ci));
    test::check_gradcheck(
        [&](const std::vector<Tensor>& in) { return linear(in[0], in[1], k.bias ? in[2] : Tensor()); },
        k.bias ? std::vector<Tensor>{x, w, b} : std::vector<Tensor>{x, w}, detail::cat("case ", ci));
  }
}

TEST_CASE("linear computes only the gradients that are needed") {
  SUBCASE("input without grad") {
    const Tensor x = test::rnd({3, 4}, 1);
    const Tensor w = test::leaf(test::rnd({2, 4}, 2)), b = test::leaf(test::rnd({2}, 3));
    sum(linear(x, w, b)).backward();
    CHECK(w.grad().defined());
    CHECK(b.grad().defined());
    CHECK_FALSE(x.grad().defined());
    // d sum(y) / db = N per output; d sum(y) / dW[o, i] = sum_n x[n, i].
    test::check_close(b.grad(), {3, 3}, test::kTolF64, "db");
    const std::vector<double> xv = x.to_vector<double>();
    std::vector<double> want(8);
    for (int o = 0; o < 2; ++o)
      for (int i = 0; i < 4; ++i) want[size_t(o * 4 + i)] = xv[size_t(i)] + xv[size_t(4 + i)] + xv[size_t(8 + i)];
    test::check_close(w.grad(), want, test::kTolF64, "dW");
  }
  SUBCASE("frozen weight") {
    const Tensor x = test::leaf(test::rnd({3, 4}, 1));
    const Tensor w = test::rnd({2, 4}, 2);
    sum(linear(x, w, Tensor())).backward();
    CHECK(x.grad().defined());
    CHECK_FALSE(w.grad().defined());
    // d sum(y) / dx[n, i] = sum_o W[o, i].
    const std::vector<double> wv = w.to_vector<double>();
    std::vector<double> want(12);
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 4; ++i) want[size_t(n * 4 + i)] = wv[size_t(i)] + wv[size_t(4 + i)];
    test::check_close(x.grad(), want, test::kTolF64, "dx");
  }
}

TEST_CASE("linear rejects bad arguments with clear messages") {
  const Tensor x = test::rnd({3, 7}, 1);
  CHECK_THROWS_WITH_AS(linear(x, test::rnd({5, 6}, 2), Tensor()), doctest::Contains("input has 7 features"), Error);
  CHECK_THROWS_WITH_AS(linear(x, test::rnd({5, 7}, 2), test::rnd({4}, 3)), doctest::Contains("bias must be [5]"),
                       Error);
  CHECK_THROWS_WITH_AS(linear(x, test::rnd({5, 7}, 2), test::rnd({5, 1}, 3)), doctest::Contains("bias must be [5]"),
                       Error);
  CHECK_THROWS_WITH_AS(linear(x, test::rnd({5, 7}, 2, DType::f32), Tensor()), doctest::Contains("different dtypes"),
                       Error);
  CHECK_THROWS_WITH_AS(linear(x, test::rnd({5, 7}, 2), test::rnd({5}, 3, DType::f32)),
                       doctest::Contains("different dtypes"), Error);
  CHECK_THROWS_WITH_AS(linear(test::rnd({7}, 1), test::rnd({5, 7}, 2), Tensor()), doctest::Contains("must be 2-D"),
                       Error);
  CHECK_THROWS_WITH_AS(linear(test::rnd({2, 3, 7}, 1), test::rnd({5, 7}, 2), Tensor()),
                       doctest::Contains("must be 2-D"), Error);
  CHECK_THROWS_WITH_AS(linear(x, test::rnd({5, 7, 1}, 2), Tensor()), doctest::Contains("must be 2-D"), Error);
  CHECK_THROWS_AS(linear(Tensor::zeros({3, 7}, DType::i64), Tensor::zeros({5, 7}, DType::i64), Tensor()), Error);
  CHECK_THROWS_AS(linear(Tensor(), test::rnd({5, 7}, 2), Tensor()), Error);
}

}  // namespace
}  // namespace rt
