// The random draws of the batch-level augmentations of torchvision's ImageNet recipe
// (--mixup-alpha, --cutmix-alpha, --random-erase): made on the host, as pure functions of
// (seed, epoch, step) for a batch and (seed, epoch, dataset index) for an image (data/seed.h),
// so a resumed run makes the same draws. The engine ops that apply them on the training
// device are rt::mix_with_rolled, rt::mix_targets and rt::erase_boxes (engine/ops.h).
#pragma once

#include <cstdint>

#include "engine/ops.h"
#include "engine/random.h"

namespace rt::data {

// Stream tags of the two users of the run's seed (see data/seed.h's tags).
inline constexpr uint64_t kMixStream = 0x6d69787570'0000ull;    // "mixup"
inline constexpr uint64_t kEraseStream = 0x6572617365'0000ull;  // "erase"

// The generator of step `step`'s mixup/cutmix draw, and of image `index`'s erase draw.
Generator mix_generator(uint64_t seed, int64_t epoch, int64_t step);
Generator erase_generator(uint64_t seed, int64_t epoch, int64_t index);

// Note [Beta draws]
// Gamma(a) by Marsaglia and Tsang (2000), "A simple method for generating gamma variables":
// for a >= 1, d = a - 1/3, c = 1 / sqrt(9 d); repeat { x = g.normal(); v = (1 + c x)^3;
// if v <= 0: again; u = 1 - g.uniform() (in (0, 1]); accept d v when u < 1 - 0.0331 x^4 or
// log u < x^2 / 2 + d (1 - v + log v) }. For a < 1: Gamma(a) = Gamma(a + 1) U^(1/a), with
// U = 1 - g.uniform() drawn after the Gamma(a + 1) loop. The logarithm is kept
// (log Gamma(a + 1) + log(U) / a), since U^(1/a) underflows to 0 for small a.
// Beta(a, b) = G1 / (G1 + G2) with G1 ~ Gamma(a) drawn first, then G2 ~ Gamma(b), computed
// as 1 / (1 + exp(log G2 - log G1)): in [0, 1], never NaN. (torch draws Beta(a, a) as
// _sample_dirichlet([a, a])[0], the same construction from its own generator.)
double gamma_log_draw(double a, Generator& g);  // log of a Gamma(a, 1) draw, a > 0
double beta_draw(double a, double b, Generator& g);

// Boxes are rt::ImageBox (engine/ops.h): rows [y1, y2), columns [x1, x2) of an H x W image.

enum class MixKind { none, mixup, cutmix };

// One batch's choice. mixup: every image n becomes lam x[n] + (1 - lam) x[n - 1] (box: the
// whole image); cutmix: the box of image n is replaced by image n - 1's, and lam is the
// adjusted one, 1 - box area / (H W); none: lam = 1, the batch unchanged. (n - 1 of image 0
// is image N - 1.) The targets mix with lam either way.
struct MixDraw {
  MixKind kind = MixKind::none;
  double lam = 1.0;
  ImageBox box;
};

// Note [Mix draw order]
// draw_mix(mixup_alpha, cutmix_alpha, g, H, W) (an alpha <= 0 switches that one off):
//   1. both on: u = g.uniform(); mixup when u < 0.5, else cutmix (torchvision's RandomChoice
//      of the two, as its collate function); one on: that one, no draw; none: no draws.
//   2. lam = beta_draw(alpha, alpha, g) (Note [Beta draws]).
//   3. cutmix only: r_x = g.randint(0, W), then r_y = g.randint(0, H); r = sqrt(1 - lam) / 2,
//      r_w_half = int(r W), r_h_half = int(r H); x1 = max(r_x - r_w_half, 0),
//      x2 = min(r_x + r_w_half, W), likewise y1, y2 with r_y and H; lam = 1 - area / (H W).
MixDraw draw_mix(double mixup_alpha, double cutmix_alpha, Generator& g, int64_t H, int64_t W);

// Note [Erase draw order]
// torchvision's RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, 3.3)) for one H x W image:
//   u = g.uniform(); u >= p: no box (one draw). Else up to 10 attempts, each:
//     area = H W * (0.02 + 0.31 g.uniform()); aspect = exp(log 0.3 + log(3.3 / 0.3) g.uniform());
//     h = round(sqrt(area * aspect)), w = round(sqrt(area / aspect)) (halves to even, as Python's
//     round); when h < H and w < W: i = g.randint(0, H - h + 1), j = g.randint(0, W - w + 1)
//     and the box is rows [i, i + h), columns [j, j + w): done.
//   No attempt fits: no box (the image unchanged).
// An empty box (h or w rounded to 0) erases nothing, as in torchvision.
struct EraseOptions {
  double scale_lo = 0.02, scale_hi = 0.33;
  double ratio_lo = 0.3, ratio_hi = 3.3;
};
ImageBox draw_erase(double p, int64_t H, int64_t W, Generator& g, const EraseOptions& opt = {});

}  // namespace rt::data
