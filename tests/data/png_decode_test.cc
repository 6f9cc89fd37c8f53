// PNG decoding: every colour type and depth becomes the RGB that PIL's convert("RGB")
// gives (alpha and tRNS dropped, 16-bit samples cut to their high byte, gray replicated),
// interlaced files read whole, and bad input becomes an rt::Error naming the file.
#include "data/codecs/png_decode.h"

#include <doctest/doctest.h>
#include <png.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/codecs/jpeg_decode.h"
#include "tests/data/data_test_util.h"

using namespace rt::data;
using rt::data::test::check_error;

namespace {

using Bytes = std::vector<uint8_t>;

// libpng's simplified writer: `px` in `format` (8-bit, or 16-bit native-endian for the
// LINEAR formats), `colormap` for the COLORMAP formats.
Bytes write_simple(int w, int h, png_uint_32 format, const void* px, const Bytes& colormap = {}) {
  png_image im{};
  im.version = PNG_IMAGE_VERSION;
  im.width = png_uint_32(w);
  im.height = png_uint_32(h);
  im.format = format;
  if (!colormap.empty()) im.colormap_entries = png_uint_32(colormap.size() / PNG_IMAGE_SAMPLE_CHANNELS(format));
  png_alloc_size_t size = 0;
  REQUIRE(png_image_write_to_memory(&im, nullptr, &size, 0, px, 0, colormap.empty() ? nullptr : colormap.data()));
  Bytes out(size);
  REQUIRE(png_image_write_to_memory(&im, out.data(), &size, 0, px, 0, colormap.empty() ? nullptr : colormap.data()));
  out.resize(size);
  return out;
}

void append(Bytes& out, png_structp png, png_bytep data, size_t n) {
  (void)png;
  out.insert(out.end(), data, data + n);
}

// libpng's full writer, for what the simplified one cannot make: Adam7 interlacing and
// depths below 8. `rows` are packed as the PNG stores them. A write error aborts (no
// setjmp): the inputs here are fixed and valid.
Bytes write_raw(int w, int h, int color_type, int depth, bool interlace, const std::vector<Bytes>& rows) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(
      png, &out, [](png_structp p, png_bytep d, size_t n) { append(*static_cast<Bytes*>(png_get_io_ptr(p)), p, d, n); },
      nullptr);
  png_set_IHDR(png, info, png_uint_32(w), png_uint_32(h), depth, color_type,
               interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  std::vector<png_bytep> ptrs;
  for (const Bytes& r : rows) ptrs.push_back(const_cast<png_bytep>(r.data()));
  png_write_image(png, ptrs.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

uint8_t value(int x, int y, int c) { return uint8_t((x * 37 + y * 11 + c * 85) & 0xFF); }

// The expected RGB of a w x h image whose channel c at (x, y) is value(x, y, c), with
// `gray` meaning every channel is value(x, y, 0).
Bytes expected_rgb(int w, int h, bool gray) {
  Bytes e;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) e.push_back(value(x, y, gray ? 0 : c));
  return e;
}

Bytes pixels(int w, int h, int channels) {
  Bytes p;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c) p.push_back(value(x, y, c));
  return p;
}

void check_image(const DecodedImage& img, int w, int h, const Bytes& rgb) {
  REQUIRE(img.width == w);
  REQUIRE(img.height == h);
  CHECK(img.box == Box{0, 0, w, h});
  CHECK(img.scale_denom == 1);
  CHECK(img.rgb == rgb);
}

// A PNG whose IHDR claims w x h (CRC fixed up), for the size checks.
Bytes with_size(Bytes png, uint32_t w, uint32_t h) {
  // Signature (8), IHDR length (4) and type (4), then width and height, big-endian.
  for (int i = 0; i < 4; ++i) {
    png[16 + size_t(i)] = uint8_t(w >> (24 - 8 * i));
    png[20 + size_t(i)] = uint8_t(h >> (24 - 8 * i));
  }
  const uLong crc = crc32(0, png.data() + 12, 4 + 13);  // type + the 13 data bytes
  for (int i = 0; i < 4; ++i) png[29 + size_t(i)] = uint8_t(crc >> (24 - 8 * i));
  return png;
}

}  // namespace

TEST_CASE("is_png looks at the 8-byte signature") {
  const Bytes png = write_simple(2, 2, PNG_FORMAT_RGB, pixels(2, 2, 3).data());
  CHECK(is_png(png));
  CHECK_FALSE(is_png(Bytes(png.begin(), png.begin() + 7)));
  CHECK_FALSE(is_png(Bytes{0xFF, 0xD8, 0xFF, 0xE0, 0, 0, 0, 0, 0}));
  Bytes bad = png;
  bad[1] = 'p';
  CHECK_FALSE(is_png(bad));
}

TEST_CASE("decode_png: RGB, gray, gray+alpha and RGBA become RGB without compositing") {
  const int w = 13, h = 7;
  const Bytes rgb = pixels(w, h, 3), gray = pixels(w, h, 1), ga = pixels(w, h, 2), rgba = pixels(w, h, 4);
  check_image(decode_png(write_simple(w, h, PNG_FORMAT_RGB, rgb.data()), "rgb.png"), w, h, expected_rgb(w, h, false));
  check_image(decode_png(write_simple(w, h, PNG_FORMAT_GRAY, gray.data()), "g.png"), w, h, expected_rgb(w, h, true));
  // value(x, y, 1) is the alpha here: pixels with alpha 0 must keep their colour.
  check_image(decode_png(write_simple(w, h, PNG_FORMAT_GA, ga.data()), "ga.png"), w, h, expected_rgb(w, h, true));
  check_image(decode_png(write_simple(w, h, PNG_FORMAT_RGBA, rgba.data()), "rgba.png"), w, h,
              expected_rgb(w, h, false));
}

TEST_CASE("decode_png: palette images, with and without transparency") {
  const int w = 9, h = 5, n = 45;
  Bytes index(size_t(w) * h), map_rgb, map_rgba;
  for (int i = 0; i < w * h; ++i) index[size_t(i)] = uint8_t((i * 7) % n);
  for (int k = 0; k < n; ++k) {
    const uint8_t c[4] = {uint8_t(k * 5), uint8_t(255 - k * 3), uint8_t(k * 17), uint8_t(k * 40)};
    map_rgb.insert(map_rgb.end(), c, c + 3);
    map_rgba.insert(map_rgba.end(), c, c + 4);
  }
  Bytes e;
  for (uint8_t i : index) e.insert(e.end(), map_rgb.begin() + 3 * i, map_rgb.begin() + 3 * i + 3);
  const Bytes p = write_simple(w, h, PNG_FORMAT_RGB_COLORMAP, index.data(), map_rgb);
  CHECK(p[25] == PNG_COLOR_TYPE_PALETTE);  // IHDR colour type: really a palette file
  check_image(decode_png(p, "p.png"), w, h, e);
  // With a tRNS chunk: PIL's convert("RGB") uses the palette colours and drops the alpha.
  const Bytes pt = write_simple(w, h, PNG_FORMAT_RGBA_COLORMAP, index.data(), map_rgba);
  CHECK(pt[25] == PNG_COLOR_TYPE_PALETTE);
  check_image(decode_png(pt, "pt.png"), w, h, e);
}

TEST_CASE("decode_png: 16-bit samples keep their high byte, gamma chunks are not applied") {
  const int w = 6, h = 4;
  std::vector<uint16_t> rgb16, y16;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) rgb16.push_back(uint16_t(value(x, y, c) << 8 | (x * 31 + c) % 256));
      y16.push_back(uint16_t(value(x, y, 0) << 8 | 0xFF));
    }
  // The simplified writer's LINEAR formats write 16-bit samples with gAMA 1.0; a
  // gamma-aware reader would brighten them, PIL (and we) do not.
  const Bytes p = write_simple(w, h, PNG_FORMAT_LINEAR_RGB, rgb16.data());
  CHECK(p[24] == 16);  // IHDR bit depth
  check_image(decode_png(p, "16.png"), w, h, expected_rgb(w, h, false));
  check_image(decode_png(write_simple(w, h, PNG_FORMAT_LINEAR_Y, y16.data()), "y16.png"), w, h,
              expected_rgb(w, h, true));
}

TEST_CASE("decode_png: Adam7 interlacing and 2-bit gray") {
  const int w = 19, h = 11;
  std::vector<Bytes> rows;
  for (int y = 0; y < h; ++y) {
    Bytes r;
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) r.push_back(value(x, y, c));
    rows.push_back(r);
  }
  check_image(decode_png(write_raw(w, h, PNG_COLOR_TYPE_RGB, 8, true, rows), "i.png"), w, h, expected_rgb(w, h, false));
  // 2-bit gray: levels 0..3 scale to 0, 85, 170, 255; four pixels per byte, MSB first.
  std::vector<Bytes> packed;
  Bytes e;
  for (int y = 0; y < h; ++y) {
    Bytes r(size_t((w + 3) / 4), 0);
    for (int x = 0; x < w; ++x) {
      const int level = (x + y) % 4;
      r[size_t(x / 4)] = uint8_t(r[size_t(x / 4)] | level << (6 - 2 * (x % 4)));
      e.insert(e.end(), 3, uint8_t(level * 85));
    }
    packed.push_back(r);
  }
  check_image(decode_png(write_raw(w, h, PNG_COLOR_TYPE_GRAY, 2, true, packed), "g2.png"), w, h, e);
}

TEST_CASE("decode_png: bad input is an rt::Error naming the file") {
  const int w = 40, h = 30;
  const Bytes good = write_simple(w, h, PNG_FORMAT_RGB, pixels(w, h, 3).data());
  check_error([&] { decode_png(Bytes(good.begin(), good.begin() + long(good.size() / 2)), "n01/cut.JPEG"); },
              {"n01/cut.JPEG", "PNG decode failed", "truncated"});
  check_error([&] { decode_png(Bytes(good.begin(), good.begin() + 20), "n01/head.JPEG"); },
              {"n01/head.JPEG", "truncated"});
  // The last IDAT's CRC (just before the 12-byte IEND chunk) is wrong.
  Bytes bad_crc = good;
  bad_crc[bad_crc.size() - 13] ^= 0x55;
  check_error([&] { decode_png(bad_crc, "n01/crc.JPEG"); }, {"n01/crc.JPEG", "PNG decode failed", "CRC"});
  // A flipped byte inside the compressed data: zlib or the CRC check catches it first.
  Bytes corrupt = good;
  corrupt[corrupt.size() / 2] ^= 0x55;
  check_error([&] { decode_png(corrupt, "n01/bad.JPEG"); }, {"n01/bad.JPEG", "PNG decode failed"});
  check_error([&] { decode_png(Bytes{0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3, 4}, "a.JPEG"); }, {"a.JPEG", "not a PNG"});
  check_error([&] { decode_png(Bytes{}, "empty.JPEG"); }, {"empty.JPEG", "not a PNG", "0 bytes"});
  // 20000 x 20000 is within libpng's own limits but above 2^28 pixels: refused before
  // allocating 1.2 GB.
  check_error([&] { decode_png(with_size(good, 20000, 20000), "big.png"); }, {"big.png", "20000x20000", "2^28"});
  check_error([&] { decode_png(with_size(good, 2000000, 1), "wide.png"); }, {"wide.png", "PNG decode failed"});
  // The JPEG decoder still names a PNG for callers that only decode JPEG.
  check_error([&] { decode_jpeg(good, "n02/png.JPEG"); }, {"n02/png.JPEG", "PNG"});
}
