// GPU-vs-CPU tests of sum / mean / max / argmax over dims: forward and backward through
// autograd on seeded random shapes (ranks 1-5, size-1 dims, both formats, keepdim or not)
// and on shapes that pick each kernel (warp per row, block per long row, column tiles with
// 32 and with 8 lanes), every float dtype; max's ties and NaN; run-to-run determinism. Without
// a GPU the GPU tests print SKIPPED lines; the launchers' host-side checks still run.
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/ops.h"
#include "kernels/cuda/reduce_dims.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;

TEST_CASE("reduce_dims launchers: host-side checks (runs without a GPU)") {
  CHECK_THROWS_WITH_AS(cuda::sum_dim(DType::i32, 1, 1, 1, nullptr, 1.0, nullptr, nullptr),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cuda::sum_dim(DType::f32, -1, 1, 1, nullptr, 1.0, nullptr, nullptr),
                       doctest::Contains("negative extent"), Error);
  CHECK_THROWS_WITH_AS(cuda::sum_dim(DType::f32, 2, 3, 4, nullptr, 1.0, nullptr, nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(cuda::max_dim(DType::f32, 2, 0, 4, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("reduced extent is 0"), Error);
  CHECK_THROWS_WITH_AS(cuda::max_dim_backward(DType::u8, 1, 1, 1, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("CUDA backend computes"), Error);
  // Nothing to compute: no launch, no device needed.
  cuda::sum_dim(DType::f32, 0, 5, 3, nullptr, 1.0, nullptr, nullptr);
  cuda::max_dim(DType::f16, 3, 5, 0, nullptr, nullptr, nullptr, nullptr);
  cuda::max_dim_backward(DType::f32, 0, 5, 3, nullptr, nullptr, nullptr, nullptr);
}

struct Case {
  Shape shape;
  std::vector<int> dims;
  bool keepdim;
  MemoryFormat format;
};

std::vector<Case> cases(bool single_dim) {
  std::vector<Case> cs = {
      {{3, 5000}, {1}, false, kNCHW},           // inner 1, long rows: a block per row
      {{700, 33}, {-1}, true, kNCHW},           // inner 1, short rows: a warp per row
      {{4, 300, 5}, {1}, false, kNCHW},         // inner 5: 32-lane column tiles
      {{64, 7, 600}, {1}, true, kNCHW},         // 1216 tiles: 8-lane column tiles
      {{2000, 3}, {0}, false, kNCHW},           // a long column sum (bias-gradient shape)
      {{2, 16, 7, 7}, {2}, true, kNHWC},        // NHWC over H
      {{3, 5, 4, 6}, {0}, true, kNHWC},         // a 4-D result whose formats differ
      {{3, 5, 4, 6}, {3}, false, kNHWC},        // NHWC over W: the result reordered
      {{1, 1, 1, 1}, {1}, true, kNHWC},
  };
  if (!single_dim) {
    cs.push_back({{8, 64, 7, 7}, {2, 3}, true, kNHWC});    // global average pooling, NHWC
    cs.push_back({{8, 64, 7, 7}, {-2, -1}, false, kNCHW});  // and NCHW
    cs.push_back({{5, 6, 7, 3}, {0, 2, 3}, false, kNCHW});  // batch-norm-like: two passes
    cs.push_back({{5, 6, 7, 3}, {0, 1, 2, 3}, true, kNHWC});
  }
  Generator g(single_dim ? 51 : 52);
  const int64_t sizes[] = {1, 2, 3, 5, 7, 9, 33};
  for (int c = 0; c < 40; ++c) {
    Case k;
    const int n = int(g.randint(1, 6));
    for (int d = 0; d < n; ++d) k.shape.push_back(sizes[g.randint(0, 7)]);
    if (single_dim) {
      k.dims = {int(g.randint(-n, n))};
    } else {
      for (int d = 0; d < n; ++d)
        if (g.randint(0, 2) == 1) k.dims.push_back(d);
      if (k.dims.empty()) k.dims.push_back(int(g.randint(0, n)));
    }
    k.keepdim = g.randint(0, 2) == 1;
    k.format = n == 4 && g.randint(0, 2) == 1 ? kNHWC : kNCHW;
    cs.push_back(k);
  }
  return cs;
}

std::string dims_of(const Case& k) {
  std::string dims = " dims";
  for (int d : k.dims) dims += " " + std::to_string(d);
  return dims + (k.keepdim ? " keepdim" : "");
}

int64_t terms(const Case& k) {
  int64_t n = 1;
  for (int d : k.dims) n *= k.shape[size_t(d < 0 ? d + int(k.shape.size()) : d)];
  return n;
}

TEST_CASE("sum and mean over dims on CUDA match the CPU: forward and backward, every dtype") {
  if (!have_gpu("sum and mean over dims")) return;
  uint64_t seed = 100;
  for (const Case& k : cases(false))
    for (bool is_mean : {false, true}) {
      const OpFn f = [&k, is_mean](const std::vector<Tensor>& in) {
        return is_mean ? mean(in[0], k.dims, k.keepdim) : sum(in[0], k.dims, k.keepdim);
      };
      // Sums: rounding grows like sqrt(terms); a mean's absolute error is the sum's / terms.
      const double sq = is_mean ? 1.0 : std::sqrt(double(terms(k)));
      check_matches_cpu(std::string(is_mean ? "mean" : "sum") + dims_of(k), f, {k.shape},
                        {DType::f32, DType::f64, DType::bf16, DType::f16},
                        MatchOptions().with_formats({k.format}).with_seed(++seed).with_forward_scale(
                            [sq](const Tensor&, const std::vector<Tensor>&) { return sq; }));
    }
}

// max picks an element and its gradient goes to that one index: exact values, argmax and
// gradient. bf16/f16 rounding makes ties common: both sides must pick the first.
TEST_CASE("max and argmax over a dim on CUDA match the CPU exactly; the gradient to the same index") {
  uint64_t seed = 200;
  for (const Case& k : cases(true)) {
    const MatchOptions o = MatchOptions().exact().with_formats({k.format}).with_seed(++seed);
    check_matches_cpu(
        "max" + dims_of(k), [&k](const std::vector<Tensor>& in) { return max(in[0], k.dims[0], k.keepdim); }, {k.shape},
        {DType::f32, DType::f64, DType::bf16, DType::f16}, o);
    MatchOptions forward = o;
    check_matches_cpu(
        "argmax" + dims_of(k), [&k](const std::vector<Tensor>& in) { return argmax(in[0], k.dims[0], k.keepdim); },
        {k.shape}, {DType::f32, DType::f64, DType::bf16, DType::f16}, forward.forward_only());
  }
}

// By hand: fixed NaN and tied inputs, which random inputs never give.
TEST_CASE("max on CUDA: NaN wins and ties go to the first index, along rows and columns") {
  if (!have_gpu("max NaN and ties")) return;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // 3 x 40: row 0 all 7 (ties), row 1 a NaN at 20 and 33, row 2 a maximum at 39.
  std::vector<double> v(120, 1.0);
  for (int i = 0; i < 40; ++i) v[size_t(i)] = 7;
  v[40 + 20] = nan, v[40 + 33] = nan, v[80 + 39] = 2;
  const Tensor x64 = Tensor::from_vector(v, {3, 40});
  for (DType t : kFloatTypes) {
    CHECK(argmax(to_gpu(x64, t), 1).to_vector<int64_t>() == std::vector<int64_t>{0, 20, 39});
    // The same along a non-innermost dim (column tiles).
    const Tensor xt = permute(x64, {1, 0});
    CHECK(argmax(to_gpu(xt, t), 0).to_vector<int64_t>() == std::vector<int64_t>{0, 20, 39});
    CHECK(std::isnan(max(to_gpu(xt, t), 0).to_vector<double>()[1]));
  }
}

// By hand: determinism, two GPU runs bit for bit.
TEST_CASE("sum over dims on CUDA is deterministic: the same bits on every run") {
  if (!have_gpu("sum over dims determinism")) return;
  const Tensor x = to_gpu(rnd({6, 3000, 37}, 7), DType::f32);
  for (const std::vector<int>& dims : std::vector<std::vector<int>>{{1}, {2}, {0, 1}, {0, 2}}) {
    const std::vector<float> a = sum(x, dims).to_vector<float>(), b = sum(x, dims).to_vector<float>();
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
}

}  // namespace
}  // namespace rt
