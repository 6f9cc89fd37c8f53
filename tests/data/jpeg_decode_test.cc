// JPEG decoding: region decodes equal the same region of a full decode (exactly without
// scaling; within a tolerance of a box-filtered full decode with DCT scaling), gray and
// Adobe CMYK files become RGB, and bad input becomes rt::Error naming the file.
#include "data/codecs/jpeg_decode.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "base/error.h"
#include "engine/random.h"
#include "tests/data/jpeg_test_util.h"

using namespace rt::data;

namespace {

std::vector<uint8_t> encode(int w, int h, int comps, J_COLOR_SPACE cs, const std::vector<uint8_t>& px,
                            int quality = 90) {
  return rt::data::test::encode_jpeg(w, h, comps, cs, px, quality);
}

// Gradients plus a little noise.
std::vector<uint8_t> pattern(int w, int h, int comps, uint64_t seed = 1) {
  rt::Generator g(seed);
  std::vector<uint8_t> px(size_t(w) * size_t(h) * size_t(comps));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < comps; ++c) {
        const int base = c == 0 ? x * 255 / w : c == 1 ? y * 255 / h : (x + y) * 255 / (w + h);
        const int v = base + int(g.randint(-12, 13));
        px[(size_t(y) * size_t(w) + size_t(x)) * size_t(comps) + size_t(c)] = uint8_t(std::clamp(v, 0, 255));
      }
  return px;
}

std::vector<uint8_t> rgb_jpeg(int w, int h) { return encode(w, h, 3, JCS_RGB, pattern(w, h, 3)); }

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const rt::Error& e) {
    return e.what();
  }
  return "(no error)";
}

void check_region_exact(const std::vector<uint8_t>& jpg, Box crop) {
  const DecodedImage full = decode_jpeg(jpg, "full.jpg");
  const DecodedImage r = decode_jpeg_region(jpg, "region.jpg", crop, 1);
  INFO("crop x=" << crop.x << " y=" << crop.y << " w=" << crop.w << " h=" << crop.h);
  REQUIRE(r.box == crop);
  REQUIRE(r.width == crop.w);
  REQUIRE(r.height == crop.h);
  int mismatches = 0;
  for (int y = 0; y < crop.h; ++y)
    for (int x = 0; x < crop.w * 3; ++x)
      mismatches += r.rgb[size_t(y) * size_t(crop.w) * 3 + size_t(x)] !=
                    full.rgb[(size_t(crop.y + y) * size_t(full.width) + size_t(crop.x)) * 3 + size_t(x)];
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("jpeg_info reads size and colour layout") {
  const ImageInfo a = jpeg_info(encode(500, 375, 3, JCS_RGB, pattern(500, 375, 3)), "a.jpg");
  CHECK(a.width == 500);
  CHECK(a.height == 375);
  CHECK(a.components == 3);
  CHECK(a.color_space == JpegColorSpace::ycbcr);
  const ImageInfo g = jpeg_info(encode(333, 77, 1, JCS_GRAYSCALE, pattern(333, 77, 1)), "g.jpg");
  CHECK(g.width == 333);
  CHECK(g.height == 77);
  CHECK(g.components == 1);
  CHECK(g.color_space == JpegColorSpace::gray);
}

TEST_CASE("full decode is close to the encoded pixels; gray becomes RGB") {
  const std::vector<uint8_t> px = pattern(333, 77, 3);
  const DecodedImage d = decode_jpeg(encode(333, 77, 3, JCS_RGB, px), "a.jpg");
  REQUIRE(d.width == 333);
  REQUIRE(d.height == 77);
  REQUIRE(d.rgb.size() == px.size());
  double err = 0;
  for (size_t i = 0; i < px.size(); ++i) err += std::abs(int(d.rgb[i]) - int(px[i]));
  CHECK(err / double(px.size()) < 6.0);

  const std::vector<uint8_t> gp = pattern(333, 77, 1);
  const DecodedImage gd = decode_jpeg(encode(333, 77, 1, JCS_GRAYSCALE, gp), "g.jpg");
  REQUIRE(gd.rgb.size() == gp.size() * 3);
  double gerr = 0;
  for (size_t i = 0; i < gp.size(); ++i) {
    CHECK(gd.rgb[3 * i] == gd.rgb[3 * i + 1]);
    CHECK(gd.rgb[3 * i] == gd.rgb[3 * i + 2]);
    gerr += std::abs(int(gd.rgb[3 * i]) - int(gp[i]));
  }
  CHECK(gerr / double(gp.size()) < 6.0);
}

TEST_CASE("region decode equals the same region of the full decode (no scaling)") {
  const std::vector<uint8_t> a = rgb_jpeg(500, 375);
  for (Box b : {Box{0, 0, 500, 375}, Box{0, 0, 1, 1}, Box{499, 374, 1, 1}, Box{17, 33, 201, 150},
                Box{16, 32, 64, 64}, Box{123, 0, 377, 375}, Box{0, 200, 500, 175}, Box{250, 101, 7, 250}})
    check_region_exact(a, b);
  const std::vector<uint8_t> b = rgb_jpeg(333, 77);
  for (Box box : {Box{0, 0, 333, 77}, Box{5, 3, 300, 70}, Box{320, 60, 13, 17}, Box{1, 1, 9, 9}})
    check_region_exact(b, box);
  const std::vector<uint8_t> g = encode(333, 77, 1, JCS_GRAYSCALE, pattern(333, 77, 1));
  for (Box box : {Box{5, 3, 300, 70}, Box{100, 40, 33, 37}}) check_region_exact(g, box);
}

TEST_CASE("DCT-scaled region decode is close to a box-downscaled full decode") {
  // libjpeg's scaled IDCT is not a box filter, and chroma is upsampled differently at the
  // lower resolution, so the comparison has a tolerance: mean abs difference <= 4 levels
  // (of 255) and every pixel within 48 (noise and 8x8 block structure allow local spikes).
  const std::vector<uint8_t> jpg = rgb_jpeg(500, 375);
  const DecodedImage full = decode_jpeg(jpg, "full.jpg");
  for (int d : {2, 4, 8}) {
    for (Box crop : {Box{0, 0, 500, 375}, Box{37, 21, 300, 250}, Box{101, 99, 399, 276}}) {
      INFO("d=" << d << " crop x=" << crop.x << " y=" << crop.y);
      const DecodedImage r = decode_jpeg_region(jpg, "r.jpg", crop, d);
      CHECK(r.scale_denom == d);
      CHECK(r.box.x == crop.x / d);
      CHECK(r.box.y == crop.y / d);
      CHECK(r.box.x + r.box.w == std::min((crop.x + crop.w + d - 1) / d, (500 + d - 1) / d));
      CHECK(r.box.y + r.box.h == std::min((crop.y + crop.h + d - 1) / d, (375 + d - 1) / d));
      double sum = 0;
      int worst = 0;
      for (int y = 0; y < r.height; ++y)
        for (int x = 0; x < r.width; ++x)
          for (int c = 0; c < 3; ++c) {
            const int X = r.box.x + x, Y = r.box.y + y;
            int acc = 0, n = 0;
            for (int yy = Y * d; yy < std::min((Y + 1) * d, full.height); ++yy)
              for (int xx = X * d; xx < std::min((X + 1) * d, full.width); ++xx, ++n)
                acc += full.rgb[(size_t(yy) * size_t(full.width) + size_t(xx)) * 3 + size_t(c)];
            const int diff = std::abs(int(r.rgb[(size_t(y) * size_t(r.width) + size_t(x)) * 3 + size_t(c)]) -
                                      (acc + n / 2) / n);
            sum += diff;
            worst = std::max(worst, diff);
          }
      CHECK(sum / (double(r.width) * r.height * 3) <= 4.0);
      CHECK(worst <= 48);
    }
  }
}

TEST_CASE("Adobe CMYK JPEGs are converted to RGB") {
  // Adobe convention: stored value = 255 - ink. With no black ink (stored K = 255) the
  // stored C, M, Y values are the R, G, B values.
  const int w = 97, h = 61;
  const std::vector<uint8_t> rgb = pattern(w, h, 3);
  std::vector<uint8_t> cmyk(size_t(w) * size_t(h) * 4);
  for (size_t i = 0; i < size_t(w) * size_t(h); ++i) {
    for (int c = 0; c < 3; ++c) cmyk[4 * i + size_t(c)] = rgb[3 * i + size_t(c)];
    cmyk[4 * i + 3] = 255;
  }
  const std::vector<uint8_t> jpg = encode(w, h, 4, JCS_CMYK, cmyk);
  const ImageInfo info = jpeg_info(jpg, "cmyk.jpg");
  CHECK(info.components == 4);
  CHECK((info.color_space == JpegColorSpace::cmyk || info.color_space == JpegColorSpace::ycck));
  const DecodedImage d = decode_jpeg(jpg, "cmyk.jpg");
  REQUIRE(d.rgb.size() == rgb.size());
  double err = 0;
  for (size_t i = 0; i < rgb.size(); ++i) err += std::abs(int(d.rgb[i]) - int(rgb[i]));
  CHECK(err / double(rgb.size()) < 6.0);
  check_region_exact(jpg, Box{10, 7, 50, 40});
}

TEST_CASE("bad input becomes rt::Error naming the file") {
  const std::vector<uint8_t> jpg = rgb_jpeg(500, 375);
  const std::vector<uint8_t> half(jpg.begin(), jpg.begin() + std::ptrdiff_t(jpg.size() / 2));
  std::string m = error_of([&] { decode_jpeg(half, "cut.jpg"); });
  INFO(m);
  CHECK(m.find("cut.jpg") != std::string::npos);
  CHECK(m.find("Premature end") != std::string::npos);
  // A region that needs the missing rows fails too.
  m = error_of([&] { decode_jpeg_region(half, "cut2.jpg", Box{0, 300, 100, 75}, 1); });
  CHECK(m.find("cut2.jpg") != std::string::npos);
  // Only the header survives: jpeg_info works, decoding fails.
  const std::vector<uint8_t> head(jpg.begin(), jpg.begin() + 700);
  CHECK(jpeg_info(head, "head.jpg").width == 500);
  CHECK(error_of([&] { decode_jpeg(head, "head.jpg"); }).find("head.jpg") != std::string::npos);

  m = error_of([&] { decode_jpeg({}, "empty.jpg"); });
  CHECK(m.find("empty.jpg") != std::string::npos);
  CHECK(m.find("not a JPEG") != std::string::npos);

  rt::Generator g(7);
  std::vector<uint8_t> noise(4096);
  for (uint8_t& b : noise) b = uint8_t(g.next_u64());
  noise[0] = 0x12;
  m = error_of([&] { jpeg_info(noise, "noise.bin"); });
  CHECK(m.find("noise.bin") != std::string::npos);
  CHECK(m.find("not a JPEG") != std::string::npos);
  // Random bytes after a JPEG start marker reach libjpeg, which rejects them.
  noise[0] = 0xFF;
  noise[1] = 0xD8;
  noise[2] = 0xFF;
  m = error_of([&] { decode_jpeg(noise, "soi_noise.jpg"); });
  CHECK(m.find("soi_noise.jpg") != std::string::npos);
  CHECK(m.find("JPEG decode failed") != std::string::npos);

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13};
  m = error_of([&] { decode_jpeg(png, "n01440764/x.JPEG"); });
  CHECK(m.find("n01440764/x.JPEG") != std::string::npos);
  CHECK(m.find("PNG") != std::string::npos);

  CHECK(error_of([&] { decode_jpeg_region(jpg, "big.jpg", Box{400, 0, 101, 10}, 1); }).find("big.jpg") !=
        std::string::npos);
  CHECK(error_of([&] { decode_jpeg_region(jpg, "d3.jpg", Box{0, 0, 10, 10}, 3); }).find("d3.jpg") !=
        std::string::npos);
}

TEST_CASE("a header announcing more than 2^28 pixels is refused before any allocation") {
  std::vector<uint8_t> jpg = rgb_jpeg(16, 16);
  // Baseline start-of-frame: FF C0, length (2), precision (1), height (2), width (2).
  size_t sof = 0;
  for (size_t i = 0; i + 8 < jpg.size(); ++i)
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) {
      sof = i;
      break;
    }
  REQUIRE(sof > 0);
  for (size_t k : {sof + 5, sof + 7}) {  // 65500 x 65500, the format's largest
    jpg[k] = 0xFF;
    jpg[k + 1] = 0xDC;
  }
  for (const std::string& m : {error_of([&] { jpeg_info(jpg, "forged.jpg"); }),
                               error_of([&] { decode_jpeg(jpg, "forged.jpg"); }),
                               error_of([&] { decode_jpeg_region(jpg, "forged.jpg", Box{0, 0, 8, 8}, 8); })}) {
    INFO(m);
    CHECK(m.find("forged.jpg: JPEG is 65500x65500 pixels, more than the 268435456") != std::string::npos);
  }
}
