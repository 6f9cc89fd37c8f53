// torchvision's automatic augmentation policies on uint8 RGB images (HWC, w x h):
// AutoAugment(IMAGENET), RandAugment, TrivialAugmentWide and AugMix, with their fifteen
// operations. The math follows torchvision 0.14 (transforms/autoaugment.py's _apply_op on
// uint8 tensors, i.e. transforms/functional_tensor.py) on torch 1.13's CPU kernels, to the
// float32 rounding where it decides a uint8 result (Note [Matching torchvision's floats] in
// auto_augment_ops.cc). Random choices come from our Generator, not torch's: the same
// distributions, drawn in the order documented at auto_augment().
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/transforms/image_transforms.h"  // Interpolation, shared with the crop and resize
#include "engine/random.h"

namespace rt::data {

// The operations, under torchvision's names (augment_op_name).
enum class AugmentOp : uint8_t {
  identity,
  shear_x,
  shear_y,
  translate_x,
  translate_y,
  rotate,
  brightness,
  color,
  contrast,
  sharpness,
  posterize,
  solarize,
  autocontrast,
  equalize,
  invert,
};
inline constexpr int kNumAugmentOps = 15;
const char* augment_op_name(AugmentOp op);  // "Identity", "ShearX", ...

enum class AutoAugmentPolicy : uint8_t { none, imagenet, ra, ta_wide, augmix };

struct AutoAugmentOptions {
  AutoAugmentPolicy policy = AutoAugmentPolicy::none;
  int ra_magnitude = 9;     // RandAugment's magnitude bin, in [0, 30] (31 bins)
  int augmix_severity = 3;  // AugMix's severity, in [1, 10]
  // torchvision's default is nearest for AutoAugment, RandAugment and TrivialAugmentWide
  // (bilinear for AugMix); the recipes pass bilinear.
  Interpolation interpolation = Interpolation::bilinear;

  bool operator==(const AutoAugmentOptions&) const = default;
};

// The command line's names: "imagenet", "ra", "ta_wide", "augmix" (and "none");
// "nearest", "bilinear". Parsing throws rt::UsageError listing the accepted names.
AutoAugmentPolicy parse_auto_augment_policy(std::string_view name);
const char* auto_augment_policy_name(AutoAugmentPolicy p);
Interpolation parse_interpolation(std::string_view name);
const char* interpolation_name(Interpolation i);
// Throws rt::UsageError when ra_magnitude or augmix_severity is out of range.
void check_auto_augment_options(const AutoAugmentOptions& opt);

// ---- the operations ----------------------------------------------------------------

// _apply_op(img, op, magnitude, interpolation, fill=None) on the RGB HWC image `img`
// (w x h, w, h >= 1), in place. Geometric ops leave black where they sample outside the
// image. Magnitudes as torchvision takes them: shears as the tangent (ShearX 0.3), the
// translations in pixels (truncated toward zero, as int()), Rotate in degrees
// (counter-clockwise), the colour ops as factor - 1, Posterize as bits (int()), Solarize
// as a threshold in [0, 255]; the others ignore it. Allocation-free after the first call
// of a thread at a given image size (thread_local scratch).
void apply_op(AugmentOp op, double magnitude, uint8_t* img, int w, int h, Interpolation interp);

// ---- the policies' tables -----------------------------------------------------------

// One entry of a policy's _augmentation_space: the op, its magnitude bins (float32, as
// torch.linspace makes them; empty for an op without magnitude) and whether a coin flips
// the magnitude's sign.
struct OpSpace {
  AugmentOp op;
  std::vector<float> bins;
  bool is_signed;
};

// The augmentation space of `policy` (imagenet: 10 bins; ra and ta_wide: 31; augmix: 10,
// all_ops) for a w x h image, in torchvision's order (the order the draws index).
std::vector<OpSpace> augmentation_space(AutoAugmentPolicy policy, int w, int h);

// One op of an AutoAugment sub-policy: applied with probability `p` at bin `bin` of the
// 10-bin space (-1: an op without magnitude).
struct SubPolicyOp {
  AugmentOp op;
  double p;
  int bin;
};
// AutoAugment(IMAGENET)'s 25 sub-policies, in torchvision's order.
std::span<const std::array<SubPolicyOp, 2>> imagenet_policies();

// torch.linspace(start, end, steps) in float32 as torch 1.13's CPU kernel computes it
// (Note [torch.linspace's floats] in auto_augment.cc).
std::vector<float> torch_linspace(double start, double end, int steps);

// ---- AugMix -------------------------------------------------------------------------

// One op of an AugMix chain: the index into augmentation_space(augmix), its bin (ignored
// for an op without magnitude) and the sign coin (ignored for an unsigned op).
struct AugMixStep {
  int op_index = 0;
  int bin = 0;
  bool negative = false;
};
inline constexpr int kAugMixWidth = 3;  // mixture_width
inline constexpr int kAugMixMaxDepth = 3;

// Everything AugMix draws for one image: the Beta weight as a Dirichlet(1, 1) sample m,
// the Dirichlet(1, 1, 1) chain weights (before they are scaled by m[1]), and the chains.
struct AugMixDraws {
  std::array<float, 2> m{};
  std::array<float, kAugMixWidth> weights{};
  std::array<int, kAugMixWidth> depth{};
  std::array<std::array<AugMixStep, kAugMixMaxDepth>, kAugMixWidth> steps{};
};

// Draws, in torchvision's order: m (two exponential draws, normalised), the weights (three),
// then per chain its depth g.randint(1, 4) and per op g.randint(0, 13), its bin
// g.randint(0, severity) when it has magnitudes, a coin g.randint(0, 2) when it is signed.
AugMixDraws draw_augmix(Generator& g, int severity);

// AugMix.forward with those draws: mix = m[0] * img + sum_i (weights[i] * m[1]) * chain_i(img)
// in float32, in torchvision's order, then truncated to uint8. In place.
void augmix_apply(uint8_t* img, int w, int h, const AugMixDraws& d, Interpolation interp);

// ---- the whole policy ---------------------------------------------------------------

// Applies opt.policy to `img` (RGB HWC, w x h) in place; none leaves it untouched. The
// draws from `g`, in order:
//   imagenet: sub-policy g.randint(0, 25), two g.uniform() (op i applies when u_i <= p_i),
//             two sign coins g.randint(0, 2) (0 = negative, as torchvision's signs[i] == 0);
//   ra:       two ops, each g.randint(0, 14) then, when signed, a coin g.randint(0, 2)
//             (1 = negative); the magnitude is bin opt.ra_magnitude;
//   ta_wide:  g.randint(0, 14), then g.randint(0, 31) for the bin when the op has bins,
//             then, when signed, a coin g.randint(0, 2) (1 = negative);
//   augmix:   draw_augmix(g, opt.augmix_severity).
// The per-example generator is data::example_generator(seed, epoch, index) (augment.h).
void auto_augment(uint8_t* img, int w, int h, const AutoAugmentOptions& opt, Generator& g);

}  // namespace rt::data
