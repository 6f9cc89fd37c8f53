// The fifteen operations of torchvision's automatic augmentation (torchvision 0.14's
// transforms/autoaugment.py _apply_op on uint8 tensors, torch 1.13's CPU kernels), on RGB
// HWC images in place.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "data/transforms/auto_augment.h"

namespace rt::data {

// Note [Matching torchvision's floats]
// A uint8 result is a float32 value truncated (.to(uint8) after clamp) or rounded half to
// even (torch.round in the affine ops), so one float32 rounding step computed differently
// can move an output by one level, and for nearest sampling a tie rounded the other way
// picks another pixel. Each op therefore repeats torch's float32 operations in torch's
// order, which this file is compiled for without FMA contraction (-ffp-contract=off), with
// std::fma where torch's build fuses:
//  * Python scalars meet uint8 tensors as float32: _blend's ratio * img1 + (1 - ratio) * img2
//    is fl(fl(float(r) * x) + fl(float(1 - r) * y)) with 1 - r taken in double first.
//  * rgb_to_grayscale: fl(fl(fl(0.2989f * r) + fl(0.587f * g)) + fl(0.114f * b)), truncated.
//  * affine/rotate: the inverse matrix in double (_get_inverse_affine_matrix), rounded to
//    float32 as theta; _gen_affine_grid divides theta by (w/2, h/2) and sums
//    fl(fl(bx * r0) + fl(by * r1)) + r2 (the 3-term bmm, no FMA: checked bit for bit against
//    the grid torch makes). grid_sample's AVX2 kernel (GCC contracts its vector expressions)
//    unnormalises x = fma(gx + 1, w / 2, -0.5) and blends the four neighbours as
//    fma(se, vse, fma(sw, vsw, fma(ne, vne, nw * vnw))) with weights s*e, s*w, n*e, n*w: its
//    float results checked equal to these on 4 million samples of random warps.
//  * autocontrast's scale is 255.0 / (max - min) as Python evaluates it on a tensor:
//    fl(fl(1 / (max - min)) * 255) (Tensor.__rtruediv__ is reciprocal() * other).
//  * sharpness's 3x3 blur (weights 1/13, centre 5/13) is rounded to the nearest integer:
//    an exact S / 13 is never within 1/26 of a half, far beyond float32's error, so the
//    integer rounding (2S + 13) / 26 gives torch's value exactly.
// Per-value maps are tables of 256 entries computed with the same float steps, so they are
// as exact as the per-pixel formula and cost a lookup per byte.

namespace {

struct Scratch {
  std::vector<uint8_t> src;   // a copy of the input (geometric ops, sharpness)
  std::vector<uint8_t> gray;  // w * h luma
  std::vector<float> col, row;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

uint8_t* grown(std::vector<uint8_t>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}
float* grown(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// torch's float -> uint8 after clamp(0, 255): truncation toward zero.
inline uint8_t trunc_u8(float v) { return uint8_t(std::min(std::max(v, 0.0f), 255.0f)); }

void apply_lut(uint8_t* img, size_t n, const uint8_t* lut) {
  for (size_t i = 0; i < n; ++i) img[i] = lut[img[i]];
}
// A table per channel (RGB interleaved).
void apply_luts(uint8_t* img, size_t pixels, const uint8_t (*lut)[256]) {
  for (size_t i = 0; i < pixels; ++i) {
    img[3 * i] = lut[0][img[3 * i]];
    img[3 * i + 1] = lut[1][img[3 * i + 1]];
    img[3 * i + 2] = lut[2][img[3 * i + 2]];
  }
}

// ---- geometry ---------------------------------------------------------------------

constexpr double kDegToRad = M_PI / 180.0;  // Python's math.radians / math.degrees constants
constexpr double kRadToDeg = 180.0 / M_PI;

// torchvision 0.14's functional._get_inverse_affine_matrix with scale 1, same operations in
// the same order (the angles in degrees).
std::array<double, 6> inverse_affine_matrix(double cx, double cy, double angle, double tx, double ty, double shear_x,
                                            double shear_y) {
  const double rot = angle * kDegToRad;
  const double sx = shear_x * kDegToRad;
  const double sy = shear_y * kDegToRad;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  std::array<double, 6> m = {d, -b, 0.0, -c, a, 0.0};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

// F_t.affine / F_t.rotate (expand=False) with fill=None: grid_sample(align_corners=False,
// padding zeros) of the inverse matrix `m`, as one pass over the output.
void warp(uint8_t* img, int w, int h, const std::array<double, 6>& m, Interpolation interp) {
  Scratch& s = scratch();
  const size_t n = size_t(w) * size_t(h) * 3;
  const uint8_t* src = static_cast<const uint8_t*>(std::memcpy(grown(s.src, n), img, n));
  const float sw = float(0.5 * w), sh = float(0.5 * h);
  const float r00 = float(m[0]) / sw, r01 = float(m[1]) / sw, r02 = float(m[2]) / sw;
  const float r10 = float(m[3]) / sh, r11 = float(m[4]) / sh, r12 = float(m[5]) / sh;
  // The base grid's x (and y) are -w/2 + 0.5 + x: exact in float32. Per column the
  // products with column weights, per row those with row weights.
  float* colx = grown(s.col, 2 * size_t(w));
  float* coly = colx + w;
  for (int x = 0; x < w; ++x) {
    const float bx = float(-w * 0.5 + 0.5 + x);
    colx[x] = bx * r00;
    coly[x] = bx * r10;
  }
  const float hw = float(w) / 2, hh = float(h) / 2;  // grid_sample's unnormalising factors
  const float fw = float(w), fh = float(h);
  for (int y = 0; y < h; ++y) {
    const float by = float(-h * 0.5 + 0.5 + y);
    const float rowx = by * r01, rowy = by * r11;
    uint8_t* out = img + size_t(y) * w * 3;
    for (int x = 0; x < w; ++x, out += 3) {
      const float gx = (colx[x] + rowx) + r02;
      const float gy = (coly[x] + rowy) + r12;
      const float ix = std::fma(gx + 1.0f, hw, -0.5f);
      const float iy = std::fma(gy + 1.0f, hh, -0.5f);
      if (interp == Interpolation::nearest) {
        const float xn = std::rint(ix), yn = std::rint(iy);  // half to even, as torch's round()
        if (xn > -1.0f && xn < fw && yn > -1.0f && yn < fh) {
          const uint8_t* p = src + (size_t(yn) * w + size_t(xn)) * 3;
          out[0] = p[0];
          out[1] = p[1];
          out[2] = p[2];
        } else {
          out[0] = out[1] = out[2] = 0;
        }
        continue;
      }
      const float x0 = std::floor(ix), y0 = std::floor(iy);
      if (!(x0 >= -1.0f && x0 < fw && y0 >= -1.0f && y0 < fh)) {  // all four neighbours outside
        out[0] = out[1] = out[2] = 0;
        continue;
      }
      const float wx = ix - x0, e = 1.0f - wx;
      const float ny = iy - y0, sy = 1.0f - ny;
      const float wnw = sy * e, wne = sy * wx, wsw = ny * e, wse = ny * wx;
      const int xi = int(x0), yi = int(y0);
      if (xi >= 0 && xi + 1 < w && yi >= 0 && yi + 1 < h) {  // the common case: no neighbour outside
        const uint8_t* pn = src + (size_t(yi) * w + size_t(xi)) * 3;
        const uint8_t* ps = pn + size_t(w) * 3;
        for (int c = 0; c < 3; ++c) {
          const float v = std::fma(float(ps[3 + c]), wse,
                                   std::fma(float(ps[c]), wsw, std::fma(float(pn[3 + c]), wne, float(pn[c]) * wnw)));
          out[c] = uint8_t(std::min(std::max(std::rint(v), 0.0f), 255.0f));
        }
        continue;
      }
      const bool in_w = xi >= 0, in_e = xi + 1 < w, in_n = yi >= 0, in_s = yi + 1 < h;
      const uint8_t* pn = src + (size_t(in_n ? yi : 0) * w) * 3;
      const uint8_t* ps = src + (size_t(in_s ? yi + 1 : 0) * w) * 3;
      const size_t cw = size_t(in_w ? xi : 0) * 3, ce = size_t(in_e ? xi + 1 : 0) * 3;
      for (int c = 0; c < 3; ++c) {
        const float vnw = in_n && in_w ? float(pn[cw + c]) : 0.0f;
        const float vne = in_n && in_e ? float(pn[ce + c]) : 0.0f;
        const float vsw = in_s && in_w ? float(ps[cw + c]) : 0.0f;
        const float vse = in_s && in_e ? float(ps[ce + c]) : 0.0f;
        const float v = std::fma(vse, wse, std::fma(vsw, wsw, std::fma(vne, wne, vnw * wnw)));
        out[c] = uint8_t(std::min(std::max(std::rint(v), 0.0f), 255.0f));
      }
    }
  }
}

// ---- colour -----------------------------------------------------------------------

// rgb_to_grayscale on uint8: float32 products and sums, truncated.
void grayscale(const uint8_t* img, size_t pixels, uint8_t* gray) {
  static const auto tables = [] {
    std::array<std::array<float, 256>, 3> t{};
    for (int v = 0; v < 256; ++v) {
      t[0][v] = 0.2989f * float(v);
      t[1][v] = 0.587f * float(v);
      t[2][v] = 0.114f * float(v);
    }
    return t;
  }();
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* p = img + 3 * i;
    gray[i] = uint8_t((tables[0][p[0]] + tables[1][p[1]]) + tables[2][p[2]]);
  }
}

// _blend's two float32 products for every uint8 value.
struct BlendTables {
  float a[256], b[256];
  explicit BlendTables(double ratio) {
    const float r = float(ratio), q = float(1.0 - ratio);
    for (int v = 0; v < 256; ++v) {
      a[v] = r * float(v);
      b[v] = q * float(v);
    }
  }
  uint8_t operator()(uint8_t x, uint8_t y) const { return trunc_u8(a[x] + b[y]); }
};

void brightness(uint8_t* img, size_t n, double factor) {
  const float r = float(factor);
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = trunc_u8(r * float(v));  // + (1 - r) * 0
  apply_lut(img, n, lut);
}

void color(uint8_t* img, size_t pixels, double factor) {
  uint8_t* gray = grown(scratch().gray, pixels);
  grayscale(img, pixels, gray);
  const BlendTables t(factor);
  for (size_t i = 0; i < pixels; ++i) {
    uint8_t* p = img + 3 * i;
    p[0] = t(p[0], gray[i]);
    p[1] = t(p[1], gray[i]);
    p[2] = t(p[2], gray[i]);
  }
}

void contrast(uint8_t* img, size_t pixels, double factor) {
  uint8_t* gray = grown(scratch().gray, pixels);
  grayscale(img, pixels, gray);
  // torch.mean in float32: the sum of integers is exact below 2^24 (images up to ~65k
  // pixels of white), then one division.
  uint64_t sum = 0;
  for (size_t i = 0; i < pixels; ++i) sum += gray[i];
  const float mean = float(sum) / float(pixels);
  const float r = float(factor), q = float(1.0 - factor);
  const float bias = q * mean;
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = trunc_u8(r * float(v) + bias);
  apply_lut(img, pixels * 3, lut);
}

void sharpness(uint8_t* img, int w, int h, double factor) {
  if (w <= 2 || h <= 2) return;  // torchvision returns such images unchanged
  const size_t n = size_t(w) * size_t(h) * 3, stride = size_t(w) * 3;
  const uint8_t* src = static_cast<const uint8_t*>(std::memcpy(grown(scratch().src, n), img, n));
  const BlendTables t(factor);
  // The border keeps its pixels as the "blurred" image, but is blended all the same
  // (r * x + (1 - r) * x in float32 need not give x back).
  for (size_t i = 0; i < n; ++i) img[i] = t(src[i], src[i]);
  for (int y = 1; y + 1 < h; ++y) {
    for (size_t i = size_t(y) * stride + 3, end = size_t(y + 1) * stride - 3; i < end; ++i) {
      const uint8_t* p = src + i;
      const int s = p[-stride - 3] + p[-stride] + p[-stride + 3] + p[-3] + 5 * p[0] + p[3] + p[stride - 3] +
                    p[stride] + p[stride + 3];
      img[i] = t(src[i], uint8_t((2 * s + 13) / 26));
    }
  }
}

void autocontrast(uint8_t* img, size_t pixels) {
  // Minima and maxima per byte position of 48-byte blocks (16 pixels: the compiler's
  // vectors), then per channel (position mod 3).
  uint8_t lo48[48], hi48[48];
  std::memset(lo48, 255, sizeof(lo48));
  std::memset(hi48, 0, sizeof(hi48));
  const size_t n = pixels * 3;
  size_t i = 0;
  for (; i + 48 <= n; i += 48) {
    for (int j = 0; j < 48; ++j) {
      lo48[j] = std::min(lo48[j], img[i + j]);
      hi48[j] = std::max(hi48[j], img[i + j]);
    }
  }
  for (; i < n; ++i) {
    lo48[i % 3] = std::min(lo48[i % 3], img[i]);
    hi48[i % 3] = std::max(hi48[i % 3], img[i]);
  }
  uint8_t lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
  for (int j = 0; j < 48; ++j) {
    lo[j % 3] = std::min(lo[j % 3], lo48[j]);
    hi[j % 3] = std::max(hi[j % 3], hi48[j]);
  }
  uint8_t lut[3][256];
  for (int c = 0; c < 3; ++c) {
    float minimum = float(lo[c]), scale = 1.0f / float(hi[c] - lo[c]) * 255.0f;
    if (hi[c] == lo[c]) minimum = 0.0f, scale = 1.0f;  // scale is inf: torchvision's eq_idxs
    for (int v = 0; v < 256; ++v) lut[c][v] = trunc_u8((float(v) - minimum) * scale);
  }
  apply_luts(img, pixels, lut);
}

// _scale_channel of every channel: the histogram LUT, or the channel unchanged when the
// step (the pixels outside the last non-empty bin, over 255) is 0.
void equalize(uint8_t* img, size_t pixels) {
  uint8_t lut[3][256];
  for (int c = 0; c < 3; ++c) {
    int64_t hist[256] = {};
    for (size_t i = 0; i < pixels; ++i) ++hist[img[3 * i + c]];
    int last = 255;
    while (last > 0 && hist[last] == 0) --last;
    // nonzero_hist[:-1].sum(): every pixel but those of the last non-empty bin.
    const int64_t step = (int64_t(pixels) - hist[last]) / 255;
    if (step == 0) {
      for (int v = 0; v < 256; ++v) lut[c][v] = uint8_t(v);
      continue;
    }
    int64_t cum = 0;
    lut[c][0] = 0;
    for (int v = 1; v < 256; ++v) {
      cum += hist[v - 1];
      lut[c][v] = uint8_t(std::min<int64_t>((cum + step / 2) / step, 255));
    }
  }
  apply_luts(img, pixels, lut);
}

}  // namespace

const char* augment_op_name(AugmentOp op) {
  static constexpr const char* kNames[] = {
      "Identity",   "ShearX", "ShearY",    "TranslateX", "TranslateY",   "Rotate",   "Brightness", "Color",
      "Contrast",   "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert",
  };
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumAugmentOps, "one name per AugmentOp");
  const int i = int(op);
  RT_CHECK(i >= 0 && i < kNumAugmentOps, "augment_op_name: bad op ", i);
  return kNames[i];
}

void apply_op(AugmentOp op, double magnitude, uint8_t* img, int w, int h, Interpolation interp) {
  RT_CHECK(w >= 1 && h >= 1, "apply_op: empty image ", w, "x", h);
  const size_t pixels = size_t(w) * size_t(h), n = pixels * 3;
  switch (op) {
    case AugmentOp::identity:
      return;
    case AugmentOp::shear_x:  // centre [0, 0]: the top-left corner stays put
      return warp(img, w, h,
                  inverse_affine_matrix(-w * 0.5, -h * 0.5, 0.0, 0.0, 0.0, std::atan(magnitude) * kRadToDeg, 0.0),
                  interp);
    case AugmentOp::shear_y:
      return warp(img, w, h,
                  inverse_affine_matrix(-w * 0.5, -h * 0.5, 0.0, 0.0, 0.0, 0.0, std::atan(magnitude) * kRadToDeg),
                  interp);
    case AugmentOp::translate_x:
      return warp(img, w, h, inverse_affine_matrix(0.0, 0.0, 0.0, std::trunc(magnitude), 0.0, 0.0, 0.0), interp);
    case AugmentOp::translate_y:
      return warp(img, w, h, inverse_affine_matrix(0.0, 0.0, 0.0, 0.0, std::trunc(magnitude), 0.0, 0.0), interp);
    case AugmentOp::rotate:  // F.rotate passes -angle to the matrix
      return warp(img, w, h, inverse_affine_matrix(0.0, 0.0, -magnitude, 0.0, 0.0, 0.0, 0.0), interp);
    case AugmentOp::brightness:
      return brightness(img, n, 1.0 + magnitude);
    case AugmentOp::color:
      return color(img, pixels, 1.0 + magnitude);
    case AugmentOp::contrast:
      return contrast(img, pixels, 1.0 + magnitude);
    case AugmentOp::sharpness:
      return sharpness(img, w, h, 1.0 + magnitude);
    case AugmentOp::posterize: {
      const int bits = int(magnitude);
      RT_CHECK(bits >= 0 && bits <= 8, "Posterize: bits ", bits, " outside [0, 8]");
      const uint8_t mask = uint8_t(-(1 << (8 - bits)));  // img & -2^(8 - bits)
      for (size_t i = 0; i < n; ++i) img[i] &= mask;
      return;
    }
    case AugmentOp::solarize: {
      const float threshold = float(magnitude);  // compared with the pixels in float32
      uint8_t lut[256];
      for (int v = 0; v < 256; ++v) lut[v] = float(v) >= threshold ? uint8_t(255 - v) : uint8_t(v);
      return apply_lut(img, n, lut);
    }
    case AugmentOp::autocontrast:
      return autocontrast(img, pixels);
    case AugmentOp::equalize:
      return equalize(img, pixels);
    case AugmentOp::invert:
      for (size_t i = 0; i < n; ++i) img[i] = uint8_t(255 - img[i]);
      return;
  }
  RT_FAIL("apply_op: bad op ", int(op));
}

}  // namespace rt::data
