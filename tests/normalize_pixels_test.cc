// normalize_pixels on the CPU: every pixel of random u8 batches, NCHW and NHWC outputs,
// f32 and f64, against (x / 255 - mean) / std computed here in double, element by element
// at its logical (n, c, h, w) position; plus argument errors.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/ops.h"
#include "engine/random.h"
#include "tests/test_util.h"

namespace rt {
namespace {

Tensor random_pixels(int64_t N, int64_t H, int64_t W, int64_t C, uint64_t seed) {
  Generator g(seed);
  std::vector<uint8_t> v(size_t(N * H * W * C));
  for (auto& b : v) b = uint8_t(g.randint(0, 256));
  return Tensor::from_vector<uint8_t>(v, {N, H, W, C});
}

TEST_CASE("normalize_pixels matches (x / 255 - mean) / std at every (n, c, h, w)") {
  const std::vector<double> mean = {0.485, 0.456, 0.406}, std = {0.229, 0.224, 0.225};
  for (auto [N, H, W] : {std::array<int64_t, 3>{2, 5, 7}, {1, 1, 1}, {3, 16, 9}}) {
    const Tensor px = random_pixels(N, H, W, 3, uint64_t(N * 100 + H));
    const std::vector<uint8_t> x = px.to_vector<uint8_t>();
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      for (DType t : {DType::f32, DType::f64}) {
        const Tensor y = normalize_pixels(px, mean, std, f, t);
        REQUIRE(y.shape() == Shape{N, 3, H, W});
        CHECK(y.format() == f);
        CHECK(y.dtype() == t);
        const std::vector<double> got = y.to_vector<double>();  // logical NCHW order
        // f32: one fma of exact operands with constants rounded to f32: within 2 ulp of
        // values below ~2.7 in magnitude; 1e-6 absolute. f64: 1e-14.
        const double tol = t == DType::f32 ? 1e-6 : 1e-14;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = 0; c < 3; ++c)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t w = 0; w < W; ++w) {
                const double want = (x[size_t(((n * H + h) * W + w) * 3 + c)] / 255.0 - mean[size_t(c)]) / std[size_t(c)];
                const double g = got[size_t(((n * 3 + c) * H + h) * W + w)];
                REQUIRE_MESSAGE(std::abs(g - want) <= tol, "n ", n, " c ", c, " h ", h, " w ", w, ": ", g, " vs ", want);
              }
      }
    }
  }
}

TEST_CASE("normalize_pixels: one mean/std for all channels, one channel, NCHW equals NHWC") {
  const Tensor px = random_pixels(2, 4, 3, 1, 7);
  const Tensor a = normalize_pixels(px, {0.5}, {0.25}, MemoryFormat::contiguous);
  const Tensor b = normalize_pixels(px, {0.5}, {0.25}, MemoryFormat::channels_last);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  const Tensor px3 = random_pixels(2, 4, 3, 3, 8);
  CHECK(normalize_pixels(px3, {0.5}, {0.25}, MemoryFormat::contiguous).to_vector<float>() ==
        normalize_pixels(px3, {0.5, 0.5, 0.5}, {0.25, 0.25, 0.25}, MemoryFormat::contiguous).to_vector<float>());
}

TEST_CASE("normalize_pixels: argument errors") {
  const Tensor px = random_pixels(1, 2, 2, 3, 1);
  CHECK_THROWS_WITH_AS(normalize_pixels(px, {0.1, 0.2}, {1.0}, MemoryFormat::contiguous),
                       doctest::Contains("mean has 2 values"), Error);
  CHECK_THROWS_WITH_AS(normalize_pixels(px, {0.1}, {0.0}, MemoryFormat::contiguous), doctest::Contains("std > 0"),
                       Error);
  CHECK_THROWS_WITH_AS(normalize_pixels(Tensor::zeros({1, 3, 2, 2}), {0.1}, {1.0}, MemoryFormat::contiguous),
                       doctest::Contains("u8 (N, H, W, C)"), Error);
  CHECK_THROWS_WITH_AS(normalize_pixels(px, {0.1}, {1.0}, MemoryFormat::contiguous, DType::bf16),
                       doctest::Contains("f32 or f64"), Error);
}

}  // namespace
}  // namespace rt
