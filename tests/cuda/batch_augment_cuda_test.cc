// GPU-vs-CPU tests of batch augmentation: mix_with_rolled (mixup, cutmix), mix_targets and
// erase_boxes_ on CUDA against the CPU ops on the same (dtype-rounded) values, at seeded random
// shapes (N 1 and odd, H, W odd and 1, C 1 and 3) in both formats, every float dtype; more
// boxes than one launch carries; a bad CUDA label gives a NaN row
// (Note [CUDA target validation]); cross_entropy_soft through autograd (check_matches_cpu).
// Without a GPU the GPU tests print SKIPPED lines.
#include <cmath>
#include <random>

#include "data/transforms/batch_augment.h"
#include "engine/ops.h"
#include "kernels/cuda/batch_augment.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

constexpr MemoryFormat kFormats[] = {MemoryFormat::contiguous, MemoryFormat::channels_last};

Shape draw_images(std::mt19937_64& rng) {
  const auto pick = [&](std::initializer_list<int64_t> v) { return *(v.begin() + rng() % v.size()); };
  return {pick({1, 2, 3, 5}), pick({1, 3, 4}), pick({1, 5, 7, 8}), pick({1, 3, 6, 9})};
}

// By hand: lam 0 and 1 must copy exactly (kExact), which the harness's gpu_tol_for would not see.
TEST_CASE("mix_with_rolled: CUDA equals the CPU (mixup, cutmix, partial boxes)") {
  if (!have_gpu("mix_with_rolled")) return;
  std::mt19937_64 rng(21);
  for (int k = 0; k < 8; ++k) {
    const Shape s = draw_images(rng);
    const int64_t H = s[2], W = s[3];
    const Tensor x64 = rnd(s, 30 + uint64_t(k));
    Generator g{uint64_t(k)};
    const data::MixDraw cut = data::draw_mix(0.0, 1.0, g, H, W);
    const double lam = g.uniform();
    const std::vector<std::pair<double, ImageBox>> cases = {
        {lam, ImageBox{0, H, 0, W}}, {0.0, cut.box}, {lam, ImageBox{H / 2, H, 0, (W + 1) / 2}}, {1.0, ImageBox{}}};
    for (const auto& [l, box] : cases)
      for (MemoryFormat f : kFormats)
        for (DType t : kFloatTypes) {
          const std::string what = label("mix_with_rolled", t, s, f) + " lam " + std::to_string(l) + " box " +
                                   std::to_string(box.y1) + ":" + std::to_string(box.y2) + "," +
                                   std::to_string(box.x1) + ":" + std::to_string(box.x2);
          const Tensor got = mix_with_rolled(to_gpu(x64, t, f), l, box);
          const Tensor want = mix_with_rolled(to_ref(x64, t, f), l, box);
          CHECK_MESSAGE(got.format() == f, what);
          CHECK_MESSAGE(got.dtype() == t, what);
          // lam 0 (cutmix) and 1 copy values: exact in every dtype.
          check_on_gpu(got, want.to(t), l == 0.0 || l == 1.0 ? kExact : gpu_tol_for(t), what);
        }
  }
}

// By hand: integer labels in, no input to draw or gradient to compare; and NaN rows.
TEST_CASE("mix_targets: CUDA equals the CPU; a bad label gives a NaN row") {
  if (!have_gpu("mix_targets")) return;
  for (int64_t N : {1, 3, 8})
    for (int64_t K : {1, 10, 1000}) {
      Generator g(uint64_t(N * 7 + K));
      std::vector<int64_t> v(static_cast<size_t>(N));
      for (auto& l : v) l = g.randint(0, K);
      const Tensor labels = Tensor::from_vector(v, {N});
      for (double lam : {0.0, 1.0, g.uniform()})
        for (DType t : kFloatTypes) {
          const Tensor got = mix_targets(labels.to(gpu()), K, lam, t);
          const Tensor want = mix_targets(labels, K, lam, ref_dtype(t));
          CHECK(got.dtype() == t);
          check_on_gpu(got, want, gpu_tol_for(t), "mix_targets " + std::string(dtype_name(t)) + " N " +
                                                      std::to_string(N) + " K " + std::to_string(K));
        }
    }
  // Row 1's label is bad: rows 1 (its own) and 2 (its predecessor's) are NaN, row 0 is not.
  const Tensor bad = Tensor::from_vector(std::vector<int64_t>{0, 7, 1}, {3}).to(gpu());
  const std::vector<double> y = mix_targets(bad, 3, 0.5).to_vector<double>();
  for (int64_t k = 0; k < 3; ++k) {
    CHECK(!std::isnan(y[size_t(k)]));
    CHECK(std::isnan(y[size_t(3 + k)]));
    CHECK(std::isnan(y[size_t(6 + k)]));
  }
}

// By hand: in place, exact, and the same storage afterwards: not a forward/backward comparison.
TEST_CASE("erase_boxes_: CUDA equals the CPU, in place, more boxes than one launch") {
  if (!have_gpu("erase_boxes_")) return;
  std::mt19937_64 rng(5);
  std::vector<Shape> shapes;
  for (int k = 0; k < 6; ++k) shapes.push_back(draw_images(rng));
  // 2.5 launches' worth of non-empty boxes.
  shapes.push_back({int64_t(cuda::kMaxBoxesPerLaunch) * 5 / 2, 2, 4, 3});
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    const int64_t N = s[0], H = s[2], W = s[3];
    Generator g(40 + i);
    std::vector<ImageBox> boxes;
    for (int64_t n = 0; n < N; ++n) boxes.push_back(data::draw_erase(i + 1 == shapes.size() ? 1.0 : 0.7, H, W, g));
    if (i + 1 == shapes.size())
      for (int64_t n = 0; n < N; ++n) boxes[size_t(n)] = {n % H, H, n % W, W};  // all non-empty
    else
      boxes[0] = {-1, H + 1, W / 2, W + 2};  // clipped to the image
    const Tensor x64 = rnd(s, 50 + i);
    for (MemoryFormat f : kFormats)
      for (DType t : kFloatTypes) {
        Tensor xd = to_gpu(x64, t, f).clone(), xr = to_ref(x64, t, f);
        const void* before = xd.raw_data();
        erase_boxes_(xd, boxes, -0.5);
        erase_boxes_(xr, boxes, -0.5);
        CHECK(xd.raw_data() == before);
        check_on_gpu(xd, xr, kExact, label("erase_boxes_", t, s, f));  // copies and one representable value
      }
  }
}

TEST_CASE("cross_entropy_soft: CUDA equals the CPU through autograd") {
  for (double e : {0.0, 0.1})
    check_matches_cpu_sweep(
        "cross_entropy_soft e " + std::to_string(e),
        [e](const std::vector<Tensor>& in) { return cross_entropy_soft(in[0], softmax(in[1], 1), e); },
        [](std::mt19937_64& rng) {
          const int64_t N = int64_t(1 + rng() % 9), K = int64_t(1 + rng() % 300);
          return ShapeDraw{{{N, K}, {N, K}}, {}};
        },
        6, 17, {DType::f32, DType::f64, DType::bf16, DType::f16},
        // The loss sums K products per row and N rows (Note [Tolerances]).
        MatchOptions().with_forward_scale([](const Tensor&, const std::vector<Tensor>& in) {
          return std::sqrt(double(in[0].numel()));
        }));
}

}  // namespace
}  // namespace rt
