// GPU-vs-CPU tests of dropout: the same mask for the same generator state
// (Note [Dropout mask]), exactly the CPU's values in f32/f64, within one rounding in
// bf16/f16, either format; the same generator advance; the backward. Without a GPU the GPU
// tests print SKIPPED lines; the launcher's host-side checks still run.
#include <string>
#include <vector>

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

const std::vector<Shape> kShapes = {{100000}, {7, 13}, {2, 3, 5, 4}, {1, 1, 1, 1}, {8, 64, 7, 7}};

std::vector<MemoryFormat> formats_of(const Shape& s) {
  return s.size() == 4 ? std::vector<MemoryFormat>{kNCHW, kNHWC} : std::vector<MemoryFormat>{kNCHW};
}

// Each side draws its mask from a generator of the same state. f32/f64: the same product
// rounded once, exactly; bf16/f16: x * scale rounded to 8/11 bits, within gpu_tol_for. The
// incoming gradient in NCHW whatever y's format (an NHWC y's converted on the way in).
TEST_CASE("dropout on CUDA: the CPU's values for the same generator state, forward and backward") {
  uint64_t seed = 10;
  for (const Shape& s : kShapes)
    for (MemoryFormat f : formats_of(s))
      for (double p : {0.1, 0.5}) {
        const uint64_t state = 99 + ++seed;
        const OpFn op = [p, state](const std::vector<Tensor>& in) {
          Generator g(state);
          return dropout(in[0], p, true, g);
        };
        MatchOptions o = MatchOptions().with_formats({f}).with_seed(seed);
        if (f == kNHWC) o.upstream_in_other_format();
        const std::string name = "dropout p " + std::to_string(p);
        check_matches_cpu(name, op, {s}, {DType::f32, DType::f64}, MatchOptions(o).exact());
        check_matches_cpu(name, op, {s}, {DType::bf16, DType::f16}, o);
      }
}

// By hand: the random stream, which the harness does not see: the generators' states after
// the call, and the mask's zeros exactly in bf16/f16 too (within gpu_tol_for a dropped
// element of x near 0 could pass for a kept one).
TEST_CASE("dropout on CUDA: the CPU's mask and generator advance for the same generator state") {
  if (!have_gpu("dropout mask")) return;
  uint64_t seed = 10;
  for (DType t : kFloatTypes)
    for (const Shape& s : kShapes)
      for (MemoryFormat f : formats_of(s))
        for (double p : {0.1, 0.5}) {
          const std::string w = label("dropout", t, s, f) + " p " + std::to_string(p);
          CAPTURE(w);
          const Tensor x64 = rnd(s, ++seed);
          Generator gd(99 + seed), gr(99 + seed);
          const Tensor yd = dropout(to_gpu(x64, t, f), p, true, gd), yr = dropout(to_ref(x64, t, f), p, true, gr);
          CHECK(gd.state() == gr.state());
          CHECK(yd.format() == f);
          // The same zeros (randn never gives an exact 0).
          const std::vector<double> a = yd.to_vector<double>(), b = yr.to_vector<double>();
          int64_t differ = 0;
          for (size_t i = 0; i < a.size(); ++i) differ += (a[i] == 0) != (b[i] == 0);
          CHECK(differ == 0);
        }
}

}  // namespace
}  // namespace rt
