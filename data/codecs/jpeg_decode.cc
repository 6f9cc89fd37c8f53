#include "data/codecs/jpeg_decode.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <cstring>

#include <jpeglib.h>
#include <jerror.h>

#include "base/error.h"
#include "data/codecs/jpeg_error.h"

namespace rt::data {

namespace {

using jpeg_detail::ErrorManager;
using jpeg_detail::guarded;
using jpeg_detail::on_emit_message;
using jpeg_detail::on_error_exit;

class Decompressor {
 public:
  Decompressor(std::span<const uint8_t> bytes, const std::string& label) : label_(label) {
    check_magic(bytes, label);
    std::memset(&cinfo_, 0, sizeof cinfo_);
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = on_error_exit;
    err_.pub.emit_message = on_emit_message;
    err_.message[0] = '\0';
    j_decompress_ptr c = &cinfo_;
    call([c] { jpeg_create_decompress(c); });
    created_ = true;
    // A constructor that throws runs no destructor: release libjpeg's memory here.
    try {
      const unsigned char* data = bytes.data();
      const unsigned long size = static_cast<unsigned long>(bytes.size());
      call([c, data, size] {
        jpeg_mem_src(c, data, size);
        jpeg_read_header(c, TRUE);
      });
      const uint64_t pixels = uint64_t(cinfo_.image_width) * uint64_t(cinfo_.image_height);
      RT_CHECK(pixels <= kMaxImagePixels, label, ": JPEG is ", cinfo_.image_width, "x", cinfo_.image_height,
               " pixels, more than the ", kMaxImagePixels,
               " (2^28) this decoder accepts; a corrupt header, or an image to downscale first");
    } catch (...) {
      jpeg_destroy_decompress(&cinfo_);
      throw;
    }
  }
  ~Decompressor() {
    if (created_) jpeg_destroy_decompress(&cinfo_);
  }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  template <typename F>
  void call(const F& f) {
    if (!guarded(&err_, f)) RT_FAIL(label_, ": JPEG decode failed: ", err_.message);
  }

  jpeg_decompress_struct* get() { return &cinfo_; }
  const std::string& label() const { return label_; }

 private:
  static void check_magic(std::span<const uint8_t> b, const std::string& label) {
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    if (b.size() >= 8 && std::memcmp(b.data(), png, 8) == 0)
      RT_FAIL(label, ": is a PNG file, not a JPEG (PNG signature found)");
    if (b.size() < 3 || b[0] != 0xFF || b[1] != 0xD8 || b[2] != 0xFF)
      RT_FAIL(label, ": not a JPEG (", b.size(), " bytes, no FF D8 FF start-of-image marker)");
  }

  std::string label_;
  ErrorManager err_;
  jpeg_decompress_struct cinfo_;
  bool created_ = false;
};

JpegColorSpace color_space_of(J_COLOR_SPACE cs) {
  switch (cs) {
    case JCS_GRAYSCALE: return JpegColorSpace::gray;
    case JCS_RGB: return JpegColorSpace::rgb;
    case JCS_YCbCr: return JpegColorSpace::ycbcr;
    case JCS_CMYK: return JpegColorSpace::cmyk;
    case JCS_YCCK: return JpegColorSpace::ycck;
    default: return JpegColorSpace::unknown;
  }
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace

ImageInfo jpeg_info(std::span<const uint8_t> bytes, const std::string& label) {
  Decompressor d(bytes, label);
  const jpeg_decompress_struct* c = d.get();
  ImageInfo info;
  info.width = int(c->image_width);
  info.height = int(c->image_height);
  info.components = c->num_components;
  info.color_space = color_space_of(c->jpeg_color_space);
  return info;
}

DecodedImage decode_jpeg_region(std::span<const uint8_t> bytes, const std::string& label, Box crop,
                                int scale_denom_hint) {
  RT_CHECK(scale_denom_hint == 1 || scale_denom_hint == 2 || scale_denom_hint == 4 || scale_denom_hint == 8,
           label, ": decode_jpeg_region: scale_denom_hint must be 1, 2, 4 or 8, got ", scale_denom_hint);
  Decompressor d(bytes, label);
  jpeg_decompress_struct* c = d.get();
  const int W = int(c->image_width), H = int(c->image_height);
  RT_CHECK(crop.w > 0 && crop.h > 0 && crop.x >= 0 && crop.y >= 0 && crop.x + crop.w <= W && crop.y + crop.h <= H,
           label, ": crop box (x=", crop.x, ", y=", crop.y, ", w=", crop.w, ", h=", crop.h, ") is not inside the ",
           W, "x", H, " image");
  const bool cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
  // libjpeg converts gray, YCbCr and RGB to RGB itself; CMYK/YCCK only as far as CMYK.
  c->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  c->scale_num = 1;
  c->scale_denom = unsigned(scale_denom_hint);
  c->dct_method = JDCT_ISLOW;
  d.call([c] { jpeg_start_decompress(c); });

  const int d_ = scale_denom_hint;
  const int OW = int(c->output_width), OH = int(c->output_height);
  DecodedImage out;
  out.scale_denom = d_;
  out.box.x = crop.x / d_;
  out.box.y = crop.y / d_;
  out.box.w = std::min(ceil_div(crop.x + crop.w, d_), OW) - out.box.x;
  out.box.h = std::min(ceil_div(crop.y + crop.h, d_), OH) - out.box.y;
  out.width = out.box.w;
  out.height = out.box.h;
  out.rgb.resize(size_t(out.width) * size_t(out.height) * 3);

  // Ask for a margin around the wanted columns: at the edges of a cropped scanline the
  // chroma upsampler replicates the edge sample instead of using the neighbour, so the
  // outermost decoded columns can differ from a full decode.
  const int margin = 16;
  const int mx0 = std::max(0, out.box.x - margin), mx1 = std::min(OW, out.box.x + out.box.w + margin);
  JDIMENSION xoff = JDIMENSION(mx0), xw = JDIMENSION(mx1 - mx0);
  if (mx1 - mx0 < OW) d.call([c, &xoff, &xw] { jpeg_crop_scanline(c, &xoff, &xw); });
  const int comps = c->output_components;
  RT_CHECK(comps == (cmyk ? 4 : 3), label, ": unexpected ", comps, " output components");
  const int slice = out.box.x - int(xoff);  // first wanted column inside the decoded row
  RT_CHECK(slice >= 0 && slice + out.box.w <= int(xw), label, ": jpeg_crop_scanline returned [", xoff, ", +", xw,
           ") which does not cover [", out.box.x, ", +", out.box.w, ")");
  if (out.box.y > 0) {
    const JDIMENSION skip = JDIMENSION(out.box.y);
    d.call([c, skip] {
      JDIMENSION done = 0;
      while (done < skip) done += jpeg_skip_scanlines(c, skip - done);
    });
  }
  // Adobe applications write CMYK inverted (0 = full ink); libjpeg passes it through.
  const bool inverted = cmyk && c->saw_Adobe_marker;
  std::vector<uint8_t> row(size_t(xw) * size_t(comps));
  JSAMPROW rowp = row.data();
  for (int y = 0; y < out.height; ++y) {
    d.call([c, &rowp] {
      while (jpeg_read_scanlines(c, &rowp, 1) != 1) {
      }
    });
    uint8_t* dst = out.rgb.data() + size_t(y) * size_t(out.width) * 3;
    const uint8_t* src = row.data() + size_t(slice) * size_t(comps);
    if (!cmyk) {
      std::memcpy(dst, src, size_t(out.width) * 3);
      continue;
    }
    for (int x = 0; x < out.width; ++x, src += 4, dst += 3) {
      // With inverted storage, value v means (255 - v) ink, so channel = v * k' / 255.
      const int k = inverted ? src[3] : 255 - src[3];
      for (int ch = 0; ch < 3; ++ch) {
        const int v = inverted ? src[ch] : 255 - src[ch];
        dst[ch] = uint8_t((v * k + 127) / 255);
      }
    }
  }
  // Rows below the crop are not needed: the destructor aborts the decompression.
  return out;
}

DecodedImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& label) {
  const ImageInfo info = jpeg_info(bytes, label);
  return decode_jpeg_region(bytes, label, Box{0, 0, info.width, info.height}, 1);
}

}  // namespace rt::data
