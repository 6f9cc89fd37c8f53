#include "data/codecs/jpeg_encode.h"

#include <cstdlib>

#include "base/error.h"
#include "data/codecs/jpeg_error.h"

namespace rt::data {

namespace {

// Owns the compressor and the buffer jpeg_mem_dest allocates with malloc.
class Compressor {
 public:
  Compressor() {
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = jpeg_detail::on_error_exit;
    err_.pub.emit_message = jpeg_detail::on_emit_message;
    err_.message[0] = '\0';
  }
  ~Compressor() {
    if (created_) jpeg_destroy_compress(&cinfo_);
    std::free(buffer_);
  }
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;

  // Runs f (libjpeg calls only) and turns libjpeg's fatal errors into rt::Error.
  template <typename F>
  void call(const std::string& label, const F& f) {
    if (!jpeg_detail::guarded(&err_, f)) RT_FAIL(label, ": JPEG encode failed: ", err_.message);
  }

  jpeg_compress_struct cinfo_{};
  jpeg_detail::ErrorManager err_{};
  bool created_ = false;
  unsigned char* buffer_ = nullptr;
  unsigned long size_ = 0;
};

}  // namespace

std::vector<uint8_t> encode_jpeg(const uint8_t* rgb, int width, int height, int quality, const std::string& label) {
  RT_CHECK(width > 0 && height > 0 && width <= 65500 && height <= 65500, label, ": cannot encode a ", width, "x",
           height, " image as JPEG (sides must be in [1, 65500])");
  RT_CHECK(quality >= 1 && quality <= 100, label, ": JPEG quality ", quality, " must be in [1, 100]");
  Compressor z;
  jpeg_compress_struct* c = &z.cinfo_;
  z.call(label, [c] { jpeg_create_compress(c); });
  z.created_ = true;
  unsigned char** buffer = &z.buffer_;
  unsigned long* size = &z.size_;
  z.call(label, [=] {
    jpeg_mem_dest(c, buffer, size);
    c->image_width = JDIMENSION(width);
    c->image_height = JDIMENSION(height);
    c->input_components = 3;
    c->in_color_space = JCS_RGB;
    jpeg_set_defaults(c);
    jpeg_set_quality(c, quality, TRUE);
    c->dct_method = JDCT_ISLOW;
    jpeg_start_compress(c, TRUE);
    while (c->next_scanline < c->image_height) {
      // libjpeg does not write through the row pointer; its API is not const-correct.
      JSAMPROW row = const_cast<uint8_t*>(rgb) + size_t(c->next_scanline) * size_t(width) * 3;
      jpeg_write_scanlines(c, &row, 1);
    }
    jpeg_finish_compress(c);
  });
  return std::vector<uint8_t>(z.buffer_, z.buffer_ + z.size_);
}

}  // namespace rt::data
