#include "data/codecs/png_decode.h"

#include <png.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace rt::data {

namespace {

constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};

// Note [longjmp]
// libpng reports errors by calling on_error, which longjmps back to the setjmp in
// read_header or read_rows. The jump skips every frame in between without running
// destructors, so those two functions and the callbacks hold only plain data; everything
// with a destructor (the output vector, the PngRead owner) lives in decode_png, outside the
// jump.
struct Source {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

void on_error(png_structp png, png_const_charp msg) {
  Source* s = static_cast<Source*>(png_get_error_ptr(png));
  std::snprintf(s->message, sizeof s->message, "%s", msg);
  png_longjmp(png, 1);
}

// Warnings ("iCCP: known incorrect sRGB profile", a CRC error in an ancillary chunk, which
// libpng then skips) do not change the pixels; printing them would only flood the log.
void on_warning(png_structp, png_const_charp) {}

void on_read(png_structp png, png_bytep out, size_t n) {
  Source* s = static_cast<Source*>(png_get_io_ptr(png));
  if (n > s->size - s->pos) png_error(png, "unexpected end of data (the file is truncated)");
  std::memcpy(out, s->data + s->pos, n);
  s->pos += n;
}

// Owns the libpng read and info structs; destroyed in decode_png's frame (Note [longjmp]).
class PngRead {
 public:
  explicit PngRead(Source* src) {
    png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, src, on_error, on_warning);
    if (png_ != nullptr) info_ = png_create_info_struct(png_);
    if (png_ != nullptr) png_set_read_fn(png_, src, on_read);
  }
  ~PngRead() { png_destroy_read_struct(&png_, &info_, nullptr); }
  PngRead(const PngRead&) = delete;
  PngRead& operator=(const PngRead&) = delete;

  bool ok() const { return png_ != nullptr && info_ != nullptr; }
  png_structp png() const { return png_; }
  png_infop info() const { return info_; }

 private:
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

struct Header {
  png_uint_32 width, height;
  int channels, passes;
  size_t rowbytes;
};

// Reads the header and asks libpng for 8-bit RGB rows whatever the file holds. Returns
// false after a libpng error (message in the Source). Plain data only (Note [longjmp]).
bool read_header(png_structp png, png_infop info, Header* h) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  const int depth = png_get_bit_depth(png, info);
  const int type = png_get_color_type(png, info);
  if (depth == 16) png_set_strip_16(png);  // the high byte, as PIL's "RGB;16B" raw mode
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if ((type & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(png);
  // Drops alpha from RGBA / gray+alpha and from the alpha that palette_to_rgb makes out of
  // a tRNS chunk: convert("RGB") ignores transparency.
  png_set_strip_alpha(png);
  h->passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  h->width = png_get_image_width(png, info);
  h->height = png_get_image_height(png, info);
  h->channels = png_get_channels(png, info);
  h->rowbytes = png_get_rowbytes(png, info);
  return true;
}

// Reads every pass of every row into `out` (rows of `stride` bytes). An interlaced image
// is read pass by pass into the same rows, which libpng fills in place.
bool read_rows(png_structp png, const Header* h, uint8_t* out, size_t stride) {
  if (setjmp(png_jmpbuf(png))) return false;
  for (int pass = 0; pass < h->passes; ++pass)
    for (png_uint_32 y = 0; y < h->height; ++y) png_read_row(png, out + size_t(y) * stride, nullptr);
  return true;
}

}  // namespace

bool is_png(std::span<const uint8_t> bytes) {
  return bytes.size() >= sizeof kSignature && std::memcmp(bytes.data(), kSignature, sizeof kSignature) == 0;
}

DecodedImage decode_png(std::span<const uint8_t> bytes, const std::string& label) {
  RT_CHECK(is_png(bytes), label, ": not a PNG (", bytes.size(),
           " bytes, no 89 50 4E 47 0D 0A 1A 0A signature at the start)");
  Source src{bytes.data(), bytes.size(), 0, {}};
  PngRead r(&src);
  RT_CHECK(r.ok(), label, ": PNG decode failed: libpng could not allocate its read structures");
  Header h{};
  if (!read_header(r.png(), r.info(), &h)) RT_FAIL(label, ": PNG decode failed: ", src.message);
  const uint64_t pixels = uint64_t(h.width) * uint64_t(h.height);
  RT_CHECK(pixels <= kMaxImagePixels, label, ": PNG is ", h.width, "x", h.height, " pixels, more than the ",
           kMaxImagePixels, " (2^28) this decoder accepts; a corrupt header, or an image to downscale first");
  // Every colour type and depth should have become 8-bit RGB; anything else is a libpng
  // transform we did not expect, better refused than read with the wrong layout.
  RT_CHECK(h.channels == 3 && h.rowbytes == size_t(h.width) * 3, label, ": PNG decode failed: libpng produced ",
           h.channels, " channels / ", h.rowbytes, " bytes per row instead of 8-bit RGB");
  DecodedImage img;
  img.width = int(h.width);
  img.height = int(h.height);
  img.rgb.resize(size_t(pixels) * 3);
  if (!read_rows(r.png(), &h, img.rgb.data(), h.rowbytes)) RT_FAIL(label, ": PNG decode failed: ", src.message);
  img.box = Box{0, 0, img.width, img.height};
  img.scale_denom = 1;
  return img;
}

}  // namespace rt::data
