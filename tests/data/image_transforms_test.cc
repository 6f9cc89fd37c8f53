// torchvision geometry: RandomResizedCrop boxes (against a plain re-implementation of
// get_params with the same draws, and hand-worked fallback cases), bilinear resize with
// half-pixel centres, Resize + CenterCrop sizes, and the JPEG train/eval transforms.
#include "data/transforms/image_transforms.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <png.h>

#include "data/codecs/png_decode.h"
#include "base/error.h"
#include "tests/data/jpeg_test_util.h"

using namespace rt::data;

namespace {

std::vector<uint8_t> encode_rgb(int w, int h, uint64_t seed = 1) {
  rt::Generator g(seed);
  std::vector<uint8_t> px(size_t(w) * size_t(h) * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        const int base = c == 0 ? x * 255 / w : c == 1 ? y * 255 / h : (x + y) * 255 / (w + h);
        px[(size_t(y) * size_t(w) + size_t(x)) * 3 + size_t(c)] =
            uint8_t(std::clamp(base + int(g.randint(-12, 13)), 0, 255));
      }
  return rt::data::test::encode_jpeg(w, h, 3, JCS_RGB, px);
}

// torchvision's get_params written out plainly (Python round = half to even).
Box plain_get_params(int W, int H, rt::Generator& g) {
  const double area = double(W) * H;
  for (int k = 0; k < 10; ++k) {
    const double target = area * (0.08 + 0.92 * g.uniform());
    const double lr = std::log(3.0 / 4.0) + (std::log(4.0 / 3.0) - std::log(3.0 / 4.0)) * g.uniform();
    const double ar = std::exp(lr);
    const int w = int(std::nearbyint(std::sqrt(target * ar)));
    const int h = int(std::nearbyint(std::sqrt(target / ar)));
    if (0 < w && w <= W && 0 < h && h <= H) {
      const int i = int(g.randint(0, H - h + 1));
      const int j = int(g.randint(0, W - w + 1));
      return Box{j, i, w, h};
    }
  }
  return Box{-1, -1, -1, -1};  // the fallback is checked separately
}

double mean_abs_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / double(a.size());
}

}  // namespace

TEST_CASE("random_resized_crop_box follows torchvision's get_params") {
  for (auto [W, H] : {std::pair{500, 375}, std::pair{333, 77}, std::pair{77, 333}, std::pair{224, 224}}) {
    for (uint64_t seed = 0; seed < 300; ++seed) {
      rt::Generator g(seed), ref(seed);
      const Box b = random_resized_crop_box(W, H, g);
      const Box p = plain_get_params(W, H, ref);
      CHECK(b.x >= 0);
      CHECK(b.y >= 0);
      CHECK(b.w > 0);
      CHECK(b.h > 0);
      CHECK(b.x + b.w <= W);
      CHECK(b.y + b.h <= H);
      if (p.w > 0) {
        CHECK(b == p);
        CHECK(g.state() == ref.state());  // the same number of draws
        const double s = double(b.w) * b.h / (double(W) * H), r = double(b.w) / b.h;
        // Rounding w and h to integers moves area and ratio a little past the bounds.
        CHECK(s >= 0.08 * 0.9);
        CHECK(s <= 1.0 + 0.05);
        CHECK(r >= 0.75 * 0.9);
        CHECK(r <= 4.0 / 3.0 * 1.1);
      }
    }
  }
  // Fallbacks, by hand: a 1000x1 image cannot hold any 3/4..4/3 crop of 8%+ area, so
  // in_ratio = 1000 > 4/3: h = 1, w = round(1 * 4/3) = 1, i = (1-1)//2 = 0,
  // j = (1000-1)//2 = 499.
  rt::Generator g(1);
  CHECK(random_resized_crop_box(1000, 1, g) == Box{499, 0, 1, 1});
  // 10x1000: in_ratio = 0.01 < 3/4: w = 10, h = round(10 / 0.75) = round(13.33) = 13,
  // i = (1000-13)//2 = 493, j = 0.
  CHECK(random_resized_crop_box(10, 1000, g) == Box{0, 493, 10, 13});
  // scale = ratio = 1 on a square: the whole image, no position draw left over.
  CHECK(random_resized_crop_box(100, 100, g, 1.0, 1.0, 1.0, 1.0) == Box{0, 0, 100, 100});
  // Python rounding: with scale=(0.5,0.5), ratio=(1,1) on 5x5: sqrt(12.5) = 3.54 -> 4;
  // and on 3x3 (area 4.5, sqrt = 2.12 -> 2). Half-to-even itself: round(2.5) = 2 via a
  // 2.5 x 2.5 target: area 6.25 = 0.25 * 25.
  rt::Generator g2(5);
  CHECK(random_resized_crop_box(5, 5, g2, 0.5, 0.5, 1.0, 1.0).w == 4);
  CHECK(random_resized_crop_box(5, 5, g2, 0.25, 0.25, 1.0, 1.0).w == 2);
  CHECK(random_resized_crop_box(3, 3, g2, 0.5, 0.5, 1.0, 1.0).w == 2);
}

TEST_CASE("bilinear resize uses half-pixel centres") {
  // 4x1 -> 2x1: source x = (o + 0.5) * 2 - 0.5 = 2o + 0.5, the mean of pixels 2o, 2o+1.
  std::vector<uint8_t> src = {0, 0, 0, 10, 20, 30, 100, 100, 100, 201, 201, 201};
  std::vector<uint8_t> out(6);
  resize_bilinear(src.data(), 4, 1, Box{0, 0, 4, 1}, 2, 1, out.data());
  CHECK(out == std::vector<uint8_t>{5, 10, 15, 151, 151, 151});
  // 2x1 -> 4x1 (upscale): x = (o + 0.5) / 2 - 0.5 = -0.25 (clamped to 0), 0.25, 0.75, 1.25
  // (clamped to the last pixel): 0, 25, 75, 100.
  std::vector<uint8_t> s2 = {0, 0, 0, 100, 100, 100};
  std::vector<uint8_t> o2(12);
  resize_bilinear(s2.data(), 2, 1, Box{0, 0, 2, 1}, 4, 1, o2.data());
  CHECK(o2 == std::vector<uint8_t>{0, 0, 0, 25, 25, 25, 75, 75, 75, 100, 100, 100});
  // Same size: a copy of the crop; a crop is clamped at its own edges.
  std::vector<uint8_t> img(7 * 5 * 3);
  for (size_t i = 0; i < img.size(); ++i) img[i] = uint8_t(i * 7);
  std::vector<uint8_t> o3(3 * 2 * 3);
  resize_bilinear(img.data(), 7, 5, Box{2, 1, 3, 2}, 3, 2, o3.data());
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 9; ++x) CHECK(o3[size_t(y * 9 + x)] == img[size_t((1 + y) * 21 + 6 + x)]);
  flip_horizontal(o3.data(), 3, 2);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x)
      for (int c = 0; c < 3; ++c)
        CHECK(o3[size_t(y * 9 + x * 3 + c)] == img[size_t((1 + y) * 21 + (2 + 2 - x) * 3 + c)]);
}

TEST_CASE("nearest resize picks torch's source pixels") {
  // torch.nn.functional.interpolate(arange(35).reshape(1, 1, 5, 7), size=(3, 11), mode="nearest")
  const std::vector<int> want = {0, 0, 1, 1, 2, 3, 3, 4, 5, 5, 6, 7, 7, 8, 8, 9, 10, 10, 11, 12, 12, 13,
                                 21, 21, 22, 22, 23, 24, 24, 25, 26, 26, 27};
  std::vector<uint8_t> src(7 * 5 * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i / 3);  // pixel k holds k in every channel
  std::vector<uint8_t> out(11 * 3 * 3);
  resize_bilinear(src.data(), 7, 5, Box{0, 0, 7, 5}, 11, 3, out.data(), Interpolation::nearest);
  for (size_t p = 0; p < want.size(); ++p)
    for (size_t c = 0; c < 3; ++c) CHECK(int(out[p * 3 + c]) == want[p]);
}

TEST_CASE("eval geometry: Resize(shorter side) then CenterCrop") {
  // 500x375 -> Resize(256): 256 * 500 / 375 = 341.33 -> 341 x 256; CenterCrop(224):
  // left = round(117 / 2) = round(58.5) = 58 (half to even), top = round(16) = 16.
  CHECK(resize_shorter_size(500, 375, 256) == Box{0, 0, 341, 256});
  CHECK(resize_shorter_size(375, 500, 256) == Box{0, 0, 256, 341});
  CHECK(resize_shorter_size(333, 77, 256) == Box{0, 0, 1107, 256});
  CHECK(center_crop_box(341, 256, 224) == Box{58, 16, 224, 224});
  CHECK(center_crop_box(227, 225, 224) == Box{2, 0, 224, 224});  // round(1.5) = 2, round(0.5) = 0
  CHECK_THROWS_AS(center_crop_box(200, 300, 224), rt::Error);

  const std::vector<uint8_t> jpg = encode_rgb(500, 375);
  std::vector<uint8_t> out(224 * 224 * 3), ref(224 * 224 * 3);
  eval_transform(jpg, "e.jpg", 256, 224, out.data());
  // Reference: full decode, resize the whole image to 341x256, cut the centre.
  const DecodedImage full = decode_jpeg(jpg, "e.jpg");
  std::vector<uint8_t> resized(341 * 256 * 3);
  resize_bilinear(full.rgb.data(), 500, 375, Box{0, 0, 500, 375}, 341, 256, resized.data());
  for (int y = 0; y < 224; ++y)
    std::copy_n(resized.begin() + std::ptrdiff_t(((16 + y) * 341 + 58) * 3), 224 * 3,
                ref.begin() + std::ptrdiff_t(y * 224 * 3));
  CHECK(out == ref);
  // A large image takes the DCT-scaled path (shorter side 600 >= 2 * 256): close, not equal.
  const std::vector<uint8_t> big = encode_rgb(900, 600);
  std::vector<uint8_t> a(224 * 224 * 3), b(224 * 224 * 3);
  eval_transform(big, "big.jpg", 256, 224, a.data());
  eval_transform(big, "big.jpg", 256, 224, b.data(), DecodeMode::full);
  CHECK(mean_abs_diff(a, b) < 4.0);
}

TEST_CASE("train_transform: crop from the header size, region decode, resize, flip") {
  const std::vector<uint8_t> jpg = encode_rgb(500, 375);
  const DecodedImage full = decode_jpeg(jpg, "t.jpg");
  int exact = 0, scaled = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    rt::Generator g(seed), g2(seed), g3(seed);
    std::vector<uint8_t> out(64 * 64 * 3), ref(64 * 64 * 3), fl(64 * 64 * 3);
    train_transform(jpg, "t.jpg", 64, g, false, out.data());
    const Box box = random_resized_crop_box(500, 375, g2);
    resize_bilinear(full.rgb.data(), 500, 375, box, 64, 64, ref.data());
    if (std::min(box.w, box.h) < 128) {
      CHECK(out == ref);  // no DCT scaling: exactly the full-decode result
      ++exact;
    } else {
      CHECK(mean_abs_diff(out, ref) < 6.0);
      ++scaled;
    }
    train_transform(jpg, "t.jpg", 64, g3, true, fl.data());
    flip_horizontal(fl.data(), 64, 64);
    CHECK(fl == out);
    CHECK(g.state() == g2.state());
  }
  CHECK(exact > 0);
  CHECK(scaled > 0);
  rt::Generator g(1);
  std::vector<uint8_t> out(224 * 224 * 3), ref(224 * 224 * 3);
  rt::Generator gf(1);
  train_transform(jpg, "t.jpg", 224, g, false, out.data());
  train_transform(jpg, "t.jpg", 224, gf, false, ref.data(), DecodeMode::full);
  CHECK(out == ref);  // 224 needs no DCT scaling on a 500x375 image

  const std::vector<uint8_t> bad(jpg.begin(), jpg.begin() + 10);
  std::string msg;
  try {
    train_transform(bad, "n0/bad.JPEG", 224, g, false, out.data());
  } catch (const rt::Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("n0/bad.JPEG") != std::string::npos);
}

// Timing only, not run by default (doctest --no-skip): decode + RandomResizedCrop + resize
// of a 500x375 q90 JPEG to 224, median of 50, one thread.
TEST_CASE("benchmark train_transform 500x375 -> 224" * doctest::skip()) {
  const std::vector<uint8_t> jpg = encode_rgb(500, 375);
  std::vector<uint8_t> out(224 * 224 * 3);
  for (DecodeMode mode : {DecodeMode::region_scaled, DecodeMode::full}) {
    std::vector<double> ms;
    rt::Generator g(3);
    for (int i = 0; i < 55; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      train_transform(jpg, "b.jpg", 224, g, false, out.data(), mode);
      const auto t1 = std::chrono::steady_clock::now();
      if (i >= 5) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%s: median %.3f ms\n", mode == DecodeMode::full ? "full" : "region_scaled", ms[ms.size() / 2]);
  }
}

// ImageNet's PNG-under-a-.JPEG files: decoded whole (no DCT scaling, even where a JPEG of
// that size would get it), then exactly the geometry of a full-resolution decode.
TEST_CASE("train_transform and eval_transform take PNG bytes") {
  const int w = 400, h = 300;
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
  rt::Generator pg(9);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t((i / 3 % size_t(w)) * 255 / size_t(w) + pg.randint(0, 40));
  png_image im{};
  im.version = PNG_IMAGE_VERSION;
  im.width = w;
  im.height = h;
  im.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  REQUIRE(png_image_write_to_memory(&im, nullptr, &size, 0, rgb.data(), 0, nullptr));
  std::vector<uint8_t> png(size);
  REQUIRE(png_image_write_to_memory(&im, png.data(), &size, 0, rgb.data(), 0, nullptr));
  png.resize(size);
  REQUIRE(decode_png(png, "p.JPEG").rgb == rgb);

  for (uint64_t seed = 0; seed < 20; ++seed) {
    const bool flip = seed % 2 == 1;
    rt::Generator g(seed), g2(seed);
    std::vector<uint8_t> out(56 * 56 * 3), ref(56 * 56 * 3);
    train_transform(png, "p.JPEG", 56, g, flip, out.data());
    resize_bilinear(rgb.data(), w, h, random_resized_crop_box(w, h, g2), 56, 56, ref.data());
    if (flip) flip_horizontal(ref.data(), 56, 56);
    CHECK(out == ref);
    CHECK(g.state() == g2.state());  // the same draws as for a JPEG of that size
  }

  // Resize(128): 400x300 -> 170x128, CenterCrop(112): left = round(29) = 29, top = 8.
  std::vector<uint8_t> out(112 * 112 * 3), full(112 * 112 * 3), ref(112 * 112 * 3), resized(170 * 128 * 3);
  eval_transform(png, "p.JPEG", 128, 112, out.data());
  eval_transform(png, "p.JPEG", 128, 112, full.data(), DecodeMode::full);
  resize_bilinear(rgb.data(), w, h, Box{0, 0, w, h}, 170, 128, resized.data());
  for (int y = 0; y < 112; ++y)
    std::copy_n(resized.begin() + std::ptrdiff_t(((8 + y) * 170 + 29) * 3), 112 * 3,
                ref.begin() + std::ptrdiff_t(y * 112 * 3));
  CHECK(out == ref);
  CHECK(full == ref);

  const std::vector<uint8_t> cut(png.begin(), png.begin() + std::ptrdiff_t(png.size() / 2));
  std::string msg;
  try {
    eval_transform(cut, "n0/png.JPEG", 128, 112, out.data());
  } catch (const rt::Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("n0/png.JPEG") != std::string::npos);
  CHECK(msg.find("PNG") != std::string::npos);
}
