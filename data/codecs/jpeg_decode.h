// JPEG decoding from memory with libjpeg-turbo's libjpeg API (system libjpeg62-turbo).
// Every failure (corrupt or truncated data, a PNG or other non-JPEG file, an unsupported
// colour layout) becomes an rt::Error whose message starts with the caller's label (the
// file name) and carries libjpeg's own message; nothing here exits or aborts.
//
// decode_jpeg_region decodes only what a crop needs: rows above the crop are skipped with
// jpeg_skip_scanlines, rows below it are never read, columns are limited with
// jpeg_crop_scanline (which widens the range to an iMCU boundary; the extra columns are
// decoded and sliced off), and libjpeg's DCT-domain scaling (1/2, 1/4, 1/8) is used when
// the caller asks for it. Because rows below the crop are not read, damage there (e.g. a
// truncated tail) is only reported when a decode needs those rows.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rt::data {

// The largest image the decoders accept (JPEG and PNG): 2^28 pixels (16384 x 16384) is
// 768 MiB of RGB, far beyond any photo, yet a forged header (JPEG allows 65500 x 65500)
// cannot make a decoder allocate tens of gigabytes.
inline constexpr uint64_t kMaxImagePixels = uint64_t(1) << 28;

// A pixel rectangle: columns [x, x + w), rows [y, y + h).
struct Box {
  int x = 0, y = 0, w = 0, h = 0;
  bool operator==(const Box&) const = default;
};

enum class JpegColorSpace { gray, rgb, ycbcr, cmyk, ycck, unknown };

struct ImageInfo {
  int width = 0, height = 0;
  int components = 0;  // as stored in the file: 1 (gray), 3 (YCbCr/RGB), 4 (CMYK/YCCK)
  JpegColorSpace color_space = JpegColorSpace::unknown;
};

struct DecodedImage {
  int width = 0, height = 0;  // of `rgb`
  std::vector<uint8_t> rgb;   // RGB, HWC, height * width * 3
  // The rectangle `rgb` covers, in the coordinates of the image scaled by 1/scale_denom
  // (libjpeg's scaled size is ceil(W / scale_denom) x ceil(H / scale_denom)).
  Box box;
  int scale_denom = 1;
};

// Header only: size and colour layout. Throws rt::Error for non-JPEG or corrupt headers,
// and for images of more than kMaxImagePixels (also in the decoders below).
ImageInfo jpeg_info(std::span<const uint8_t> bytes, const std::string& label);

// Decodes the part of the image that `crop` (full-resolution coordinates, must lie inside
// the image) covers, scaled by 1/scale_denom_hint in the DCT domain (1, 2, 4 or 8; pass a
// factor only when the crop will be downscaled at least that much). The result's box is
// the smallest scaled-pixel rectangle containing the crop:
// [floor(x/d), ceil((x+w)/d)) x [floor(y/d), ceil((y+h)/d)), clipped to the scaled image.
DecodedImage decode_jpeg_region(std::span<const uint8_t> bytes, const std::string& label, Box crop,
                                int scale_denom_hint = 1);

// The whole image at full resolution.
DecodedImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& label);

}  // namespace rt::data
