// PNG decoding from memory with libpng 1.6 (system libpng16), for the few ImageNet files
// that are PNGs under a .JPEG name. The result is what PIL's Image.open(f).convert("RGB")
// gives, which is what torchvision's loader feeds its transforms:
//   - gray, palette (tRNS ignored), RGB: 8-bit RGB;
//   - gray+alpha, RGBA: the alpha channel is dropped, not composited onto a background;
//   - 16-bit samples: the high byte is kept;
//   - gAMA / iCCP / sRGB chunks are not applied (PIL does not apply them either).
// libpng's simplified API (png_image_*) was not used: it composites alpha onto the output
// buffer and converts 16-bit files it assumes linear into sRGB, so its pixels differ from
// PIL's on exactly the images that matter here.
//
// Every failure (not a PNG, truncated data, CRC error, corrupt compressed data, an image of
// more than 2^28 pixels) becomes an rt::Error whose message starts with the caller's label
// (the file name) and carries libpng's own message.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "data/codecs/jpeg_decode.h"

namespace rt::data {

// True when `bytes` start with the 8-byte PNG signature 89 'P' 'N' 'G' 0D 0A 1A 0A.
bool is_png(std::span<const uint8_t> bytes);

// The whole image as RGB HWC 8-bit; box = {0, 0, width, height}, scale_denom = 1.
DecodedImage decode_png(std::span<const uint8_t> bytes, const std::string& label);

}  // namespace rt::data
