// JPEG encoding with libjpeg-turbo (system libjpeg62-turbo), for `ringtape pack`'s re-encoded
// shards: baseline, 4:2:0 chroma subsampling and the standard quantisation tables scaled by
// `quality` (libjpeg's 1..100 scale, the defaults of cjpeg and of PIL's save).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rt::data {

// RGB HWC (height * width * 3 bytes) to JPEG bytes. Throws rt::Error starting with `label`
// on a bad size or quality, or when libjpeg fails.
std::vector<uint8_t> encode_jpeg(const uint8_t* rgb, int width, int height, int quality, const std::string& label);

}  // namespace rt::data
