// Test JPEGs written with libjpeg's compressor into memory (for the decode and transform
// tests). CMYK input gets libjpeg's Adobe marker from jpeg_set_defaults.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <jpeglib.h>

namespace rt::data::test {

inline std::vector<uint8_t> encode_jpeg(int w, int h, int comps, J_COLOR_SPACE cs, const std::vector<uint8_t>& px,
                                        int quality = 90) {
  jpeg_compress_struct c;
  jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = comps;
  c.in_color_space = cs;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(px.data()) + size_t(c.next_scanline) * size_t(w) * size_t(comps);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  std::free(buf);
  jpeg_destroy_compress(&c);
  return out;
}

}  // namespace rt::data::test
