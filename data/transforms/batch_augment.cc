#include "data/transforms/batch_augment.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "data/seed.h"

namespace rt::data {

Generator mix_generator(uint64_t seed, int64_t epoch, int64_t step) {
  return Generator(derive_seed(derive_seed(derive_seed(seed, kMixStream), uint64_t(epoch)), uint64_t(step)));
}

Generator erase_generator(uint64_t seed, int64_t epoch, int64_t index) {
  return Generator(derive_seed(derive_seed(derive_seed(seed, kEraseStream), uint64_t(epoch)), uint64_t(index)));
}

// Gamma and Beta as Note [Beta draws] describes.
double gamma_log_draw(double a, Generator& g) {
  RT_CHECK(a > 0 && std::isfinite(a), "gamma_log_draw: shape must be positive and finite, got ", a);
  const double shape = a < 1 ? a + 1 : a;
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  double log_g;
  for (;;) {
    const double x = g.normal();
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = 1.0 - g.uniform();  // (0, 1]
    const double x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2 || std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) {
      log_g = std::log(d * v);
      break;
    }
  }
  if (a < 1) log_g += std::log(1.0 - g.uniform()) / a;
  return log_g;
}

double beta_draw(double a, double b, Generator& g) {
  const double l1 = gamma_log_draw(a, g);
  const double l2 = gamma_log_draw(b, g);
  return 1.0 / (1.0 + std::exp(l2 - l1));
}

// The draws in the order of Note [Mix draw order].
MixDraw draw_mix(double mixup_alpha, double cutmix_alpha, Generator& g, int64_t H, int64_t W) {
  RT_CHECK(H > 0 && W > 0, "draw_mix: empty image ", H, " x ", W);
  const bool mixup = mixup_alpha > 0, cutmix = cutmix_alpha > 0;
  MixDraw m;
  if (!mixup && !cutmix) return m;
  m.kind = mixup && cutmix ? (g.uniform() < 0.5 ? MixKind::mixup : MixKind::cutmix)
                           : (mixup ? MixKind::mixup : MixKind::cutmix);
  const double alpha = m.kind == MixKind::mixup ? mixup_alpha : cutmix_alpha;
  m.lam = beta_draw(alpha, alpha, g);
  if (m.kind == MixKind::mixup) {
    m.box = {0, H, 0, W};
    return m;
  }
  const int64_t r_x = g.randint(0, W), r_y = g.randint(0, H);
  const double r = 0.5 * std::sqrt(1.0 - m.lam);
  const auto r_w_half = int64_t(r * double(W)), r_h_half = int64_t(r * double(H));  // int(): truncation
  m.box.x1 = std::max<int64_t>(r_x - r_w_half, 0);
  m.box.y1 = std::max<int64_t>(r_y - r_h_half, 0);
  m.box.x2 = std::min<int64_t>(r_x + r_w_half, W);
  m.box.y2 = std::min<int64_t>(r_y + r_h_half, H);
  m.lam = 1.0 - double((m.box.x2 - m.box.x1) * (m.box.y2 - m.box.y1)) / double(W * H);
  return m;
}

// The draws in the order of Note [Erase draw order].
ImageBox draw_erase(double p, int64_t H, int64_t W, Generator& g, const EraseOptions& opt) {
  RT_CHECK(H > 0 && W > 0, "draw_erase: empty image ", H, " x ", W);
  if (!(g.uniform() < p)) return {};
  const double area = double(H) * double(W);
  const double log_lo = std::log(opt.ratio_lo), log_hi = std::log(opt.ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * (opt.scale_lo + (opt.scale_hi - opt.scale_lo) * g.uniform());
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * g.uniform());
    // std::nearbyint in the default rounding mode rounds halves to even, as Python's round.
    const auto h = int64_t(std::nearbyint(std::sqrt(erase_area * aspect)));
    const auto w = int64_t(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < H && w < W)) continue;
    const int64_t i = g.randint(0, H - h + 1);
    const int64_t j = g.randint(0, W - w + 1);
    return {i, i + h, j, j + w};
  }
  return {};
}

}  // namespace rt::data
