#include "data/transforms/image_transforms.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "data/codecs/png_decode.h"
#include "base/error.h"

namespace rt::data {

namespace {

// Python's round() for the values torchvision passes to int(round(...)): half to even
// (nearbyint in the default rounding mode).
int py_round(double v) { return int(std::nearbyint(v)); }

// One axis of a resampling: output index o (plus `offset`, for a window of a larger
// virtual output) samples source position start + (o + offset + 0.5) * step - 0.5,
// clamped into the source pixels [lo, hi] the way torch clamps into its input.
// Nearest (torch's mode="nearest") samples source pixel floor(start + (o + offset) * step)
// instead, the same clamp; its taps are that pixel twice with weight 0, so the bilinear
// passes below copy it exactly.
struct AxisSpec {
  double start, step;
  int offset, lo, hi;
  bool nearest = false;
};

struct AxisTaps {
  std::vector<int> i0, i1;
  std::vector<float> w1;
};

AxisTaps make_taps(const AxisSpec& a, int n) {
  AxisTaps t;
  t.i0.resize(size_t(n));
  t.i1.resize(size_t(n));
  t.w1.resize(size_t(n));
  const int len = a.hi - a.lo + 1;
  for (int o = 0; o < n; ++o) {
    // Nearest as torch computes it: floorf(o * scale) with a float scale.
    double r = a.nearest ? a.start + double(float(o + a.offset) * float(a.step)) - a.lo
                         : a.start + (o + a.offset + 0.5) * a.step - 0.5 - a.lo;
    if (r < 0) r = 0;
    int i0 = int(r);
    if (i0 > len - 1) i0 = len - 1;
    const int i1 = a.nearest ? i0 : std::min(i0 + 1, len - 1);
    const double w = a.nearest ? 0.0 : std::clamp(r - i0, 0.0, 1.0);
    t.i0[size_t(o)] = a.lo + i0;
    t.i1[size_t(o)] = a.lo + i1;
    t.w1[size_t(o)] = float(w);
  }
  return t;
}

// Note [Separable resampling]
// Bilinear interpolation is a horizontal lerp of two source rows followed by a vertical
// lerp of the results, so each needed source row is lerped horizontally once into a float
// row (reused by the next output row when it needs the same source row, as in upscaling),
// and the vertical pass runs over contiguous floats, which the compiler vectorises. The
// arithmetic is the same as a per-pixel four-tap loop: top = (1 - wx) a + wx b per row,
// then (1 - wy) top + wy bot, rounded half up. A horizontal flip is folded into the
// horizontal taps (output column x takes the taps of column W - 1 - x), so it costs no
// extra pass.
void resample(const uint8_t* src, int src_w, int src_h, const AxisSpec& ax, const AxisSpec& ay, int out_w,
              int out_h, uint8_t* out, bool flip = false) {
  RT_CHECK(ax.lo >= 0 && ax.hi < src_w && ax.lo <= ax.hi && ay.lo >= 0 && ay.hi < src_h && ay.lo <= ay.hi,
           "resize: source window [", ax.lo, ", ", ax.hi, "] x [", ay.lo, ", ", ay.hi, "] is outside the ", src_w,
           "x", src_h, " image");
  RT_CHECK(out_w > 0 && out_h > 0, "resize: output size must be positive, got ", out_w, "x", out_h);
  const AxisTaps tx = make_taps(ax, out_w), ty = make_taps(ay, out_h);
  const size_t stride = size_t(src_w) * 3, row_len = size_t(out_w) * 3;
  // Per output column (after the flip): byte offsets of the two source pixels, weight.
  const size_t cols = static_cast<size_t>(out_w);
  std::vector<int> x0(cols), x1(cols);
  std::vector<float> wx(cols);
  for (int o = 0; o < out_w; ++o) {
    const size_t t = size_t(flip ? out_w - 1 - o : o);
    x0[size_t(o)] = tx.i0[t] * 3;
    x1[size_t(o)] = tx.i1[t] * 3;
    wx[size_t(o)] = tx.w1[t];
  }
  // Two horizontally resampled rows, out_w x 3 floats each, and the source rows they hold.
  std::vector<float> rows(2 * row_len);
  int held[2] = {-1, -1};
  auto horizontal = [&](int sy, float* __restrict h) {
    const uint8_t* __restrict r = src + size_t(sy) * stride;
    const int* __restrict p0 = x0.data();
    const int* __restrict p1 = x1.data();
    const float* __restrict w = wx.data();
    for (int o = 0; o < out_w; ++o) {
      const uint8_t* a = r + p0[o];
      const uint8_t* b = r + p1[o];
      const float w1 = w[o], w0 = 1.0f - w1;
      h[3 * o + 0] = w0 * float(a[0]) + w1 * float(b[0]);
      h[3 * o + 1] = w0 * float(a[1]) + w1 * float(b[1]);
      h[3 * o + 2] = w0 * float(a[2]) + w1 * float(b[2]);
    }
  };
  // The buffer holding source row sy, filling the other one if neither does.
  auto row_for = [&](int sy, int keep) -> const float* {
    for (int k = 0; k < 2; ++k)
      if (held[k] == sy) return &rows[size_t(k) * row_len];
    const int k = keep == 0 ? 1 : 0;
    horizontal(sy, &rows[size_t(k) * row_len]);
    held[k] = sy;
    return &rows[size_t(k) * row_len];
  };
  for (int oy = 0; oy < out_h; ++oy) {
    const int s0 = ty.i0[size_t(oy)], s1 = ty.i1[size_t(oy)];
    const float* __restrict top = row_for(s0, -1);
    const int k0 = held[0] == s0 ? 0 : 1;
    const float* __restrict bot = row_for(s1, k0);
    const float w1 = ty.w1[size_t(oy)], w0 = 1.0f - w1;
    uint8_t* __restrict dst = out + size_t(oy) * row_len;
    for (size_t i = 0; i < row_len; ++i) {
      const float v = w0 * top[i] + w1 * bot[i];
      dst[i] = uint8_t(std::clamp(int(v + 0.5f), 0, 255));
    }
  }
}

// Note [DCT scales 1/2, 1/4, 1/8 only]
// libjpeg-turbo 2.x also decodes at M/8 for any M, which would DCT-scale the common
// ImageNet case (a 250-450 px crop for 224: M = 5..7). It does not pay. Only the 8x8, 4x4
// and 2x2 inverse DCTs have SIMD code; 3, 5, 6 and 7 are scalar C, and with 4:2:0 chroma is
// inverse-transformed at 2M x 2M (10x10..14x14) instead of 8x8 plus SIMD upsampling.
// Whole-image decode per ~500x375 q90 file (2.1.5, 2.1 GHz VM): 8/8 1954 us; 7/8 2472, 6/8
// 2165, 5/8 1857, 4/8 1649, 3/8 1614, 2/8 1459, 1/8 1135 (Huffman decoding, ~1100 us, is
// the floor). RandomResizedCrop(224) with the smallest M/8 >= the output size ran at
// ~465-520 images/s per core vs ~515-645 for this.
int dct_scale_for(int have, int want) {
  for (int d : {8, 4, 2})
    if (have >= d * want) return d;
  return 1;
}

// The axis of a crop [start, start + len) of the source resized to n samples.
AxisSpec crop_axis(int start, int len, int n, Interpolation interp) {
  return {double(start), double(len) / n, 0, start, start + len - 1, interp == Interpolation::nearest};
}

// Resize(resize) + CenterCrop(crop) of a W x H image from `img`, its decode at 1/d scale
// (the whole image): only the crop window of the resized image is computed.
void eval_resample(const DecodedImage& img, int W, int H, int d, int resize, int crop, Interpolation interp,
                   uint8_t* out) {
  const Box rs = resize_shorter_size(W, H, resize);
  const Box cc = center_crop_box(rs.w, rs.h, crop);
  const bool nearest = interp == Interpolation::nearest;
  const AxisSpec ax{0.0, double(W) / rs.w / d, cc.x, 0, img.width - 1, nearest};
  const AxisSpec ay{0.0, double(H) / rs.h / d, cc.y, 0, img.height - 1, nearest};
  resample(img.rgb.data(), img.width, img.height, ax, ay, crop, crop, out);
}

}  // namespace

Box random_resized_crop_box(int W, int H, Generator& g, double scale_lo, double scale_hi, double ratio_lo,
                            double ratio_hi) {
  RT_CHECK(W > 0 && H > 0, "random_resized_crop_box: image size must be positive, got ", W, "x", H);
  RT_CHECK(scale_lo <= scale_hi && ratio_lo <= ratio_hi && ratio_lo > 0,
           "random_resized_crop_box: need scale_lo <= scale_hi and 0 < ratio_lo <= ratio_hi");
  const double area = double(H) * double(W);
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * (scale_lo + (scale_hi - scale_lo) * g.uniform());
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * g.uniform());
    const int w = py_round(std::sqrt(target_area * aspect));
    const int h = py_round(std::sqrt(target_area / aspect));
    if (0 < w && w <= W && 0 < h && h <= H) {
      const int i = int(g.randint(0, H - h + 1));
      const int j = int(g.randint(0, W - w + 1));
      return Box{j, i, w, h};
    }
  }
  const double in_ratio = double(W) / double(H);
  int w, h;
  if (in_ratio < ratio_lo) {
    w = W;
    h = py_round(w / ratio_lo);
  } else if (in_ratio > ratio_hi) {
    h = H;
    w = py_round(h * ratio_hi);
  } else {
    w = W;
    h = H;
  }
  return Box{(W - w) / 2, (H - h) / 2, w, h};
}

void resize_bilinear(const uint8_t* src, int src_w, int src_h, Box crop, int out_w, int out_h, uint8_t* out,
                     Interpolation interp) {
  RT_CHECK(crop.w > 0 && crop.h > 0, "resize_bilinear: empty crop");
  resample(src, src_w, src_h, crop_axis(crop.x, crop.w, out_w, interp), crop_axis(crop.y, crop.h, out_h, interp),
           out_w, out_h, out);
}

void flip_horizontal(uint8_t* img, int w, int h) {
  for (int y = 0; y < h; ++y) {
    uint8_t* row = img + size_t(y) * size_t(w) * 3;
    for (int a = 0, b = w - 1; a < b; ++a, --b)
      for (int c = 0; c < 3; ++c) std::swap(row[size_t(a) * 3 + size_t(c)], row[size_t(b) * 3 + size_t(c)]);
  }
}

Box resize_shorter_size(int W, int H, int resize) {
  RT_CHECK(W > 0 && H > 0 && resize > 0, "resize_shorter_size: sizes must be positive");
  if (W <= H) return Box{0, 0, resize, int(int64_t(resize) * H / W)};
  return Box{0, 0, int(int64_t(resize) * W / H), resize};
}

Box center_crop_box(int W, int H, int crop) {
  RT_CHECK(crop > 0 && crop <= W && crop <= H, "center_crop_box: crop ", crop, " does not fit in ", W, "x", H);
  return Box{py_round((W - crop) / 2.0), py_round((H - crop) / 2.0), crop, crop};
}

void train_transform(std::span<const uint8_t> bytes, const std::string& label, int size, Generator& g, bool flip,
                     uint8_t* out_hwc, DecodeMode mode, Interpolation interp) {
  RT_CHECK(size > 0, label, ": train_transform: size must be positive, got ", size);
  if (is_png(bytes)) {
    // A PNG (a handful of ImageNet's .JPEG files): no region decode or DCT scaling, so
    // decode it whole and cut the same box, as mode full does for a JPEG.
    const DecodedImage img = decode_png(bytes, label);
    const Box box = random_resized_crop_box(img.width, img.height, g);
    resample(img.rgb.data(), img.width, img.height, crop_axis(box.x, box.w, size, interp),
             crop_axis(box.y, box.h, size, interp), size, size, out_hwc, flip);
    return;
  }
  const ImageInfo info = jpeg_info(bytes, label);
  const Box box = random_resized_crop_box(info.width, info.height, g);
  if (mode == DecodeMode::full) {
    const DecodedImage img = decode_jpeg(bytes, label);
    resample(img.rgb.data(), img.width, img.height, crop_axis(box.x, box.w, size, interp),
             crop_axis(box.y, box.h, size, interp), size, size, out_hwc, flip);
  } else {
    const int d = dct_scale_for(std::min(box.w, box.h), size);
    const DecodedImage img = decode_jpeg_region(bytes, label, box, d);
    // The crop in the decoded image's coordinates (fractional when d > 1).
    const bool nearest = interp == Interpolation::nearest;
    const AxisSpec ax{double(box.x) / d - img.box.x, double(box.w) / d / size, 0, 0, img.width - 1, nearest};
    const AxisSpec ay{double(box.y) / d - img.box.y, double(box.h) / d / size, 0, 0, img.height - 1, nearest};
    resample(img.rgb.data(), img.width, img.height, ax, ay, size, size, out_hwc, flip);
  }
}

void eval_transform(std::span<const uint8_t> bytes, const std::string& label, int resize, int crop,
                    uint8_t* out_hwc, DecodeMode mode, Interpolation interp) {
  if (is_png(bytes)) {
    // A PNG: decoded whole at full size (d = 1), then the JPEG path's geometry.
    const DecodedImage img = decode_png(bytes, label);
    eval_resample(img, img.width, img.height, 1, resize, crop, interp, out_hwc);
    return;
  }
  const ImageInfo info = jpeg_info(bytes, label);
  const Box rs = resize_shorter_size(info.width, info.height, resize);
  center_crop_box(rs.w, rs.h, crop);  // refuse a crop larger than the image before decoding
  const int d =
      mode == DecodeMode::full ? 1 : dct_scale_for(std::min(info.width, info.height), resize);
  const DecodedImage img = decode_jpeg_region(bytes, label, Box{0, 0, info.width, info.height}, d);
  eval_resample(img, info.width, info.height, d, resize, crop, interp, out_hwc);
}

}  // namespace rt::data
