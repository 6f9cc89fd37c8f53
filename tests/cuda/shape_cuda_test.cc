// GPU-vs-CPU tests of the copying shape ops (permute, contiguous, narrow, split, concat)
// through the CUDA strided-copy kernel: exact values (bits only move) for every float dtype,
// i64 and u8 (the four element sizes), both formats, seeded random shapes; gradients through
// autograd. Without a GPU the GPU tests print SKIPPED lines; the launcher's host-side checks
// still run.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "engine/ops.h"
#include "kernels/cuda/strided_copy.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;

TEST_CASE("strided_copy launcher: host-side checks (runs without a GPU)") {
  const int64_t size[9] = {2, 2, 2, 2, 2, 2, 2, 2, 2}, st[9] = {};
  CHECK_THROWS_WITH_AS(cuda::strided_copy(4, 9, size, st, st, nullptr, nullptr, nullptr),
                       doctest::Contains("at most 8"), Error);
  int64_t buf[2] = {};
  CHECK_THROWS_WITH_AS(cuda::strided_copy(3, 1, size, st, st, buf, buf, nullptr),
                       doctest::Contains("element size 3"), Error);
  CHECK_THROWS_WITH_AS(cuda::strided_copy(4, 1, size, st, st, nullptr, nullptr, nullptr),
                       doctest::Contains("null pointer"), Error);
  const int64_t zero[1] = {0};
  cuda::strided_copy(4, 1, zero, st, st, nullptr, nullptr, nullptr);  // nothing to copy: no launch
}

Shape random_shape(Generator& g, int min_rank = 1) {
  const int64_t sizes[] = {1, 2, 3, 5, 7, 33};
  Shape s;
  const int n = int(g.randint(min_rank, 6));
  for (int d = 0; d < n; ++d) s.push_back(sizes[g.randint(0, 6)]);
  return s;
}

// The value v64 on the GPU and on the CPU for dtype t (i64: the values rounded to integers
// times 1000, so every dtype's bits differ from element to element; u8: those integers' low
// byte, the 1-byte copy of u8 images).
struct Pair {
  Tensor gpu, cpu;
};
Pair make(const Tensor& v64, DType t, MemoryFormat f) {
  if (t == DType::i64) {
    std::vector<int64_t> v;
    for (double x : v64.to_vector<double>()) v.push_back(int64_t(x * 1000));
    const Tensor c = in_fmt(Tensor::from_vector(v, v64.shape()), f);
    return {c.to(gpu()), c};
  }
  if (t == DType::u8) {
    std::vector<uint8_t> v;
    for (double x : v64.to_vector<double>()) v.push_back(uint8_t(int64_t(x * 1000) & 0xFF));
    const Tensor c = in_fmt(Tensor::from_vector(v, v64.shape()), f);
    return {c.to(gpu()), c};
  }
  return {to_gpu(v64, t, f), to_ref(v64, t, f)};
}

constexpr DType kTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::u8};

// By hand: exact (kExact) in every dtype, integers too; the harness allows gpu_tol_for.
TEST_CASE("permute, narrow, split and concat on CUDA equal the CPU exactly (every dtype, both formats)") {
  if (!have_gpu("shape ops forward")) return;
  Generator g(61);
  uint64_t seed = 100;
  for (int c = 0; c < 40; ++c) {
    const Shape s = random_shape(g);
    const int n = int(s.size());
    const MemoryFormat f = n == 4 && g.randint(0, 2) == 1 ? kNHWC : kNCHW;
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    for (int k = n - 1; k > 0; --k) std::swap(order[size_t(k)], order[size_t(g.randint(0, k + 1))]);
    const int d = int(g.randint(0, n));
    const int64_t len = s[size_t(d)], cut = g.randint(0, len + 1);
    const Tensor v64 = rnd(s, ++seed);
    for (DType t : kTypes) {
      const std::string w = label("shape ops", t, s, f) + " dim " + std::to_string(d);
      CAPTURE(w);
      const Pair x = make(v64, t, f);
      const Tensor pd = permute(x.gpu, order), pc = permute(x.cpu, order);
      CHECK(pd.device() == gpu());
      CHECK(pd.to_vector<double>() == pc.to_vector<double>());
      const std::vector<Tensor> sd = split(x.gpu, {cut, len - cut}, d), sc = split(x.cpu, {cut, len - cut}, d);
      for (size_t p = 0; p < 2; ++p) {
        CHECK(sd[p].format() == sc[p].format());
        CHECK(sd[p].to_vector<double>() == sc[p].to_vector<double>());
      }
      const Tensor cd = concat({sd[1], x.gpu, sd[0]}, d), cc = concat({sc[1], x.cpu, sc[0]}, d);
      CHECK(cd.format() == cc.format());
      CHECK(cd.to_vector<double>() == cc.to_vector<double>());
      if (n == 4) CHECK(contiguous(x.gpu).to_vector<double>() == x.cpu.to_vector<double>());
    }
  }
}

// By hand: y must be exact (kExact), the harness would allow gpu_tol_for; the seed is permuted.
TEST_CASE("shape ops on CUDA: gradients equal the CPU's (every float dtype, both formats)") {
  if (!have_gpu("shape ops backward")) return;
  Generator g(62);
  uint64_t seed = 200;
  for (int c = 0; c < 20; ++c) {
    const Shape s = random_shape(g, 2);
    const int n = int(s.size());
    const MemoryFormat f = n == 4 && g.randint(0, 2) == 1 ? kNHWC : kNCHW;
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::rotate(order.begin(), order.begin() + 1, order.end());
    const int d = int(g.randint(0, n));
    const int64_t len = s[size_t(d)], cut = len / 2;
    const Tensor v64 = rnd(s, ++seed), w64 = rnd(s, ++seed);
    for (DType t : kFloatTypes) {
      const std::string w = label("shape ops backward", t, s, f);
      CAPTURE(w);
      // loss = <seed, permute(concat(b, a))> with (a, b) = split(x): every backward at once.
      auto run = [&](const Tensor& x) {
        const std::vector<Tensor> p = split(x, {cut, len - cut}, d);
        return permute(concat({p[1], p[0]}, d), order);
      };
      Tensor xd = to_gpu(v64, t, f).set_requires_grad(true), xr = to_ref(v64, t, f).set_requires_grad(true);
      const Tensor yd = run(xd), yr = run(xr);
      check_on_gpu(yd, yr, kExact, w + " y");
      yd.backward(to_gpu(permute(w64, order), t));
      yr.backward(to_ref(permute(w64, order), t));
      CHECK(xd.grad().format() == f);
      // The pieces' gradients are added by autograd: one rounding per add in the dtype.
      check_on_gpu(xd.grad(), xr.grad(), gpu_tol_for(t), w + " dx");
    }
  }
}

}  // namespace
}  // namespace rt
