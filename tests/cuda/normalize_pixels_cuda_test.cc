// normalize_pixels on CUDA against the CPU kernel: random u8 batches (ImageNet-sized and
// odd), NCHW and NHWC outputs. f32 and f64 must match the CPU bit for bit (the same fma
// on the same rounded constants); bf16/f16 are the f32 values rounded once.
#include "engine/ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

Tensor random_pixels(const Shape& nhwc, uint64_t seed) {
  Generator g(seed);
  std::vector<uint8_t> v(size_t(shape_numel(nhwc)));
  for (auto& b : v) b = uint8_t(g.randint(0, 256));
  return Tensor::from_vector<uint8_t>(v, nhwc);
}

// By hand: uint8 pixels in (nothing to draw or differentiate), compared bit for bit.
TEST_CASE("normalize_pixels: CUDA equals the CPU") {
  if (!have_gpu("normalize_pixels")) return;
  const std::vector<double> mean = {0.485, 0.456, 0.406}, std = {0.229, 0.224, 0.225};
  for (const Shape& s : {Shape{4, 224, 224, 3}, Shape{3, 7, 5, 3}, Shape{1, 1, 1, 3}}) {
    const Tensor px = random_pixels(s, uint64_t(s[1]));
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      for (DType t : kFloatTypes) {
        const Tensor got = normalize_pixels(px.to(gpu()), mean, std, f, t);
        CHECK(got.format() == f);
        const Tensor want = normalize_pixels(px, mean, std, f, ref_dtype(t));
        if (t == DType::f32 || t == DType::f64) {
          CHECK_MESSAGE(got.to_vector<double>() == want.to_vector<double>(), shape_str(s), " ", dtype_name(t));
        } else {
          CHECK_MESSAGE(got.to_vector<double>() == want.to(t).to_vector<double>(), shape_str(s), " ", dtype_name(t));
        }
      }
    }
  }
}

}  // namespace
}  // namespace rt
