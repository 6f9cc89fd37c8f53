// ImageNet-style geometry, following torchvision:
//   train: RandomResizedCrop(size) (+ horizontal flip chosen by the caller),
//   eval:  Resize(resize) then CenterCrop(crop).
// Resizing is bilinear with half-pixel centres (align_corners=False) and no antialiasing,
// i.e. the sampling positions of torch.nn.functional.interpolate(mode="bilinear",
// align_corners=False, antialias=False) / torchvision tensor transforms with
// antialias=False; values are computed in float and rounded to nearest. PIL's bilinear
// (and torchvision with antialias=True) widens the filter when downscaling, so it blurs
// more than this on large downscales; results differ there.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "data/codecs/jpeg_decode.h"
#include "engine/random.h"

namespace rt::data {

// torchvision.transforms.RandomResizedCrop.get_params on a W x H image. Random draws, in
// order, per attempt: scale = U(scale_lo, scale_hi), log-ratio = U(log ratio_lo,
// log ratio_hi) (g.uniform(), in double where torch uses float32), then after a success
// top = g.randint(0, H-h+1) and left = g.randint(0, W-w+1). Rounding is Python's round()
// (half to even). After 10 failed attempts: a centred crop clamped to the ratio range.
Box random_resized_crop_box(int W, int H, Generator& g, double scale_lo = 0.08, double scale_hi = 1.0,
                            double ratio_lo = 3.0 / 4.0, double ratio_hi = 4.0 / 3.0);

// torchvision's --interpolation (InterpolationMode) for the crop and resize: bilinear as
// described at the top of this file, or nearest: source pixel floor(o * in / out) of the
// crop, torch.nn.functional.interpolate(mode="nearest")'s choice.
enum class Interpolation : uint8_t { nearest, bilinear };

// Bilinear (or, with `interp`, nearest) resize of the `crop` rectangle of an RGB HWC image (src_w x src_h) to
// out_w x out_h. Source positions: x = crop.x + (ox + 0.5) * crop.w / out_w - 0.5, clamped
// to the crop, as when the crop is cut out first and then resized.
void resize_bilinear(const uint8_t* src, int src_w, int src_h, Box crop, int out_w, int out_h, uint8_t* out,
                     Interpolation interp = Interpolation::bilinear);

// Mirrors an RGB HWC image left-right in place.
void flip_horizontal(uint8_t* img, int w, int h);

// torchvision Resize(int) output size: the shorter side becomes `resize`, the longer
// int(resize * long / short) (truncated). Returns {0, 0, w, h}.
Box resize_shorter_size(int W, int H, int resize);
// torchvision CenterCrop offsets in a W x H image: top = int(round((H - crop) / 2.0)),
// left likewise (half to even). Requires crop <= W, H.
Box center_crop_box(int W, int H, int crop);

enum class DecodeMode {
  region_scaled,  // decode only the crop, with DCT scaling when it is >= 2x/4x/8x too large
  full,           // decode everything at full size (reference; slower)
};

// train_transform and eval_transform take JPEG bytes, or PNG bytes (a PNG is decoded whole
// with libpng, then cropped and resized the same way, without DCT scaling).
//
// Draws a RandomResizedCrop box on the full image size (from the JPEG header), decodes
// that region, resizes it to size x size and mirrors it if `flip`. Writes size*size*3
// bytes (RGB HWC) to out_hwc. DCT scaling by d in {2,4,8} (the largest with box.w >= d*size
// and box.h >= d*size; Note [DCT scales 1/2, 1/4, 1/8 only] in image_transforms.cc) makes
// the result slightly different from a full-resolution decode (libjpeg's scaled IDCT
// instead of the bilinear taps).
void train_transform(std::span<const uint8_t> bytes, const std::string& label, int size, Generator& g, bool flip,
                     uint8_t* out_hwc, DecodeMode mode = DecodeMode::region_scaled,
                     Interpolation interp = Interpolation::bilinear);

// Resize shorter side to `resize`, centre crop `crop` x `crop`; writes crop*crop*3 bytes.
// Only the crop window of the resized image is computed. Uses DCT scaling by d when the
// shorter side is >= d * resize (mode region_scaled).
void eval_transform(std::span<const uint8_t> bytes, const std::string& label, int resize, int crop,
                    uint8_t* out_hwc, DecodeMode mode = DecodeMode::region_scaled,
                    Interpolation interp = Interpolation::bilinear);

}  // namespace rt::data
