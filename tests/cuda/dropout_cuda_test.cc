// GPU-vs-CPU tests of dropout: the same mask for the same generator state
// (Note [Dropout mask]), exactly the CPU's values in f32/f64, within one rounding in
// bf16/f16, either format; the same generator advance; the backward. Without a GPU the GPU
// tests print SKIPPED lines; the launcher's host-side checks still run.
#include "engine/ops.h"
#include "engine/random.h"
#include "kernels/cuda/dropout.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;

TEST_CASE("dropout launcher: host-side checks (runs without a GPU)") {
  CHECK_THROWS_WITH_AS(cuda::dropout(DType::i64, 1, {1, 1, 1, 1, false}, 0.5, 2.0, nullptr, nullptr, nullptr),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cuda::dropout(DType::f32, 1, {-1, 1, 1, 1, false}, 0.5, 2.0, nullptr, nullptr, nullptr),
                       doctest::Contains("negative extent"), Error);
  CHECK_THROWS_WITH_AS(cuda::dropout(DType::f32, 1, {4, 1, 1, 1, false}, 0.5, 2.0, nullptr, nullptr, nullptr),
                       doctest::Contains("null pointer"), Error);
  cuda::dropout(DType::f32, 1, {0, 3, 1, 1, true}, 0.5, 2.0, nullptr, nullptr, nullptr);  // empty: no launch
}

// By hand: the RNG stream (the generators' state, the same mask) and exact f32/f64 values.
TEST_CASE("dropout on CUDA: the CPU's mask and values for the same generator state, forward and backward") {
  if (!have_gpu("dropout")) return;
  const std::vector<Shape> shapes = {{100000}, {7, 13}, {2, 3, 5, 4}, {1, 1, 1, 1}, {8, 64, 7, 7}};
  uint64_t seed = 10;
  for (DType t : kFloatTypes)
    for (const Shape& s : shapes)
      for (MemoryFormat f : s.size() == 4 ? std::vector<MemoryFormat>{kNCHW, kNHWC} : std::vector<MemoryFormat>{kNCHW})
        for (double p : {0.1, 0.5}) {
          const std::string w = label("dropout", t, s, f) + " p " + std::to_string(p);
          CAPTURE(w);
          const Tensor x64 = rnd(s, ++seed), g64 = rnd(s, ++seed);
          poison_allocator(x64.numel());
          Tensor xd = to_gpu(x64, t, f).set_requires_grad(true), xr = to_ref(x64, t, f).set_requires_grad(true);
          Generator gd(99 + seed), gr(99 + seed);
          const Tensor yd = dropout(xd, p, true, gd), yr = dropout(xr, p, true, gr);
          CHECK(gd.state() == gr.state());
          CHECK(yd.format() == f);
          // The mask: exactly the same zeros (randn never gives an exact 0).
          const std::vector<double> a = yd.to_vector<double>(), b = yr.to_vector<double>();
          int64_t differ = 0;
          for (size_t i = 0; i < a.size(); ++i) differ += (a[i] == 0) != (b[i] == 0);
          CHECK(differ == 0);
          // f32/f64: the same product rounded once; bf16/f16: x * scale rounded to 8/11 bits.
          const Tol tol = t == DType::f32 || t == DType::f64 ? kExact : gpu_tol_for(t);
          check_on_gpu(yd, yr, tol, w + " y");
          yd.backward(to_gpu(g64, t, kNCHW));  // a gradient in NCHW whatever y's format
          yr.backward(to_ref(g64, t, kNCHW));
          check_on_gpu(xd.grad(), xr.grad(), tol, w + " dx");
        }
}

}  // namespace
}  // namespace rt
