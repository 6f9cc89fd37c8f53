// torchvision 0.14's AutoAugment(IMAGENET), RandAugment, TrivialAugmentWide and AugMix
// (transforms/autoaugment.py): their op lists and magnitude bins, the draws (from our
// Generator) and AugMix's mixing. The operations are in auto_augment_ops.cc.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>

#include "base/error.h"
#include "base/usage_error.h"
#include "data/transforms/auto_augment.h"

namespace rt::data {

// Note [torch.linspace's floats]
// The bins are float32 tensors made by torch.linspace, and their exact floats matter: a
// translation is int(bin) and a solarize threshold is compared with integers. torch 1.13's
// CPU kernel (an AVX2 build, as Debian's) computes step = (end - start) / (steps - 1) in
// float32, then element i as start + step * i below steps / 2 and end - step * (steps - 1 - i)
// from there, each with one rounding (GCC contracts it to an FMA). Its vectorised loop takes
// the first multiple of 16 elements in blocks of 8: such a block's first element is
// computed as above and element k of it as first + k * step in two float32 roundings. The
// test compares every bin with torch's, bit for bit.
std::vector<float> torch_linspace(double start, double end, int steps) {
  RT_CHECK(steps >= 1, "torch_linspace: steps ", steps);
  const float a = float(start), b = float(end);
  if (steps == 1) return {a};
  const float step = (b - a) / float(steps - 1);
  const int half = steps / 2;
  auto scalar = [&](int i) {
    return i < half ? std::fma(step, float(i), a) : std::fma(-step, float(steps - 1 - i), b);
  };
  std::vector<float> v(static_cast<size_t>(steps));
  int i = 0;
  for (; i + 16 <= steps; i += 8) {
    const float first = scalar(i);
    for (int k = 0; k < 8; ++k) v[size_t(i + k)] = first + float(k) * step;
  }
  for (; i < steps; ++i) v[size_t(i)] = scalar(i);
  return v;
}

namespace {

// 8 - (torch.arange(n) / ((n - 1) / parts)).round().int() (top = 8), AugMix's with top 4.
std::vector<float> posterize_bins(int top, int n, double parts) {
  const float d = float((n - 1) / parts);
  std::vector<float> v(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) v[size_t(k)] = float(top - int(std::nearbyint(float(k) / d)));
  return v;
}

std::vector<OpSpace> space(AutoAugmentPolicy policy, int w, int h) {
  using O = AugmentOp;
  const bool wide = policy == AutoAugmentPolicy::ta_wide;
  const int n = policy == AutoAugmentPolicy::ra || wide ? 31 : 10;
  const double shear = wide ? 0.99 : 0.3, colour = wide ? 0.99 : 0.9;
  const double tx = wide ? 32.0 : policy == AutoAugmentPolicy::augmix ? w / 3.0 : 150.0 / 331.0 * w;
  const double ty = wide ? 32.0 : policy == AutoAugmentPolicy::augmix ? h / 3.0 : 150.0 / 331.0 * h;
  const double rotate = wide ? 135.0 : 30.0;
  std::vector<OpSpace> s;
  if (policy == AutoAugmentPolicy::ra || wide) s.push_back({O::identity, {}, false});
  s.push_back({O::shear_x, torch_linspace(0.0, shear, n), true});
  s.push_back({O::shear_y, torch_linspace(0.0, shear, n), true});
  s.push_back({O::translate_x, torch_linspace(0.0, tx, n), true});
  s.push_back({O::translate_y, torch_linspace(0.0, ty, n), true});
  s.push_back({O::rotate, torch_linspace(0.0, rotate, n), true});
  const bool augmix = policy == AutoAugmentPolicy::augmix;
  if (!augmix) {
    for (O op : {O::brightness, O::color, O::contrast, O::sharpness})
      s.push_back({op, torch_linspace(0.0, colour, n), true});
  }
  s.push_back({O::posterize, augmix ? posterize_bins(4, n, 4.0) : posterize_bins(8, n, wide ? 6.0 : 4.0), false});
  s.push_back({O::solarize, torch_linspace(255.0, 0.0, n), false});
  s.push_back({O::autocontrast, {}, false});
  s.push_back({O::equalize, {}, false});
  if (policy == AutoAugmentPolicy::imagenet) s.push_back({O::invert, {}, false});
  if (augmix) {  // all_ops=True appends the colour ops
    for (O op : {O::brightness, O::color, O::contrast, O::sharpness})
      s.push_back({op, torch_linspace(0.0, colour, n), true});
  }
  return s;
}

// The space of the last (policy, w, h) this thread used: the data loader's crops all have
// one size, so the bins are computed once per thread.
const std::vector<OpSpace>& cached_space(AutoAugmentPolicy policy, int w, int h) {
  struct Cache {
    AutoAugmentPolicy policy = AutoAugmentPolicy::none;
    int w = -1, h = -1;
    std::vector<OpSpace> space;
  };
  thread_local Cache c;
  if (c.policy != policy || c.w != w || c.h != h) {
    c.space = space(policy, w, h);
    c.policy = policy, c.w = w, c.h = h;
  }
  return c.space;
}

// A bin's value as _apply_op receives it: float(tensor[bin]), negated by the sign coin.
double magnitude_of(const OpSpace& s, int bin, bool negative) {
  if (s.bins.empty()) return 0.0;
  RT_CHECK(bin >= 0 && size_t(bin) < s.bins.size(), augment_op_name(s.op), ": bin ", bin, " of ", s.bins.size());
  const double m = s.bins[size_t(bin)];
  return s.is_signed && negative ? -m : m;
}

constexpr const char* kPolicyNames[] = {"none", "imagenet", "ra", "ta_wide", "augmix"};
constexpr const char* kInterpolationNames[] = {"nearest", "bilinear"};

}  // namespace

std::vector<OpSpace> augmentation_space(AutoAugmentPolicy policy, int w, int h) {
  RT_CHECK(policy != AutoAugmentPolicy::none, "augmentation_space: no policy");
  return space(policy, w, h);
}

std::span<const std::array<SubPolicyOp, 2>> imagenet_policies() {
  using O = AugmentOp;
  static constexpr std::array<SubPolicyOp, 2> kPolicies[] = {
      {{{O::posterize, 0.4, 8}, {O::rotate, 0.6, 9}}},
      {{{O::solarize, 0.6, 5}, {O::autocontrast, 0.6, -1}}},
      {{{O::equalize, 0.8, -1}, {O::equalize, 0.6, -1}}},
      {{{O::posterize, 0.6, 7}, {O::posterize, 0.6, 6}}},
      {{{O::equalize, 0.4, -1}, {O::solarize, 0.2, 4}}},
      {{{O::equalize, 0.4, -1}, {O::rotate, 0.8, 8}}},
      {{{O::solarize, 0.6, 3}, {O::equalize, 0.6, -1}}},
      {{{O::posterize, 0.8, 5}, {O::equalize, 1.0, -1}}},
      {{{O::rotate, 0.2, 3}, {O::solarize, 0.6, 8}}},
      {{{O::equalize, 0.6, -1}, {O::posterize, 0.4, 6}}},
      {{{O::rotate, 0.8, 8}, {O::color, 0.4, 0}}},
      {{{O::rotate, 0.4, 9}, {O::equalize, 0.6, -1}}},
      {{{O::equalize, 0.0, -1}, {O::equalize, 0.8, -1}}},
      {{{O::invert, 0.6, -1}, {O::equalize, 1.0, -1}}},
      {{{O::color, 0.6, 4}, {O::contrast, 1.0, 8}}},
      {{{O::rotate, 0.8, 8}, {O::color, 1.0, 2}}},
      {{{O::color, 0.8, 8}, {O::solarize, 0.8, 7}}},
      {{{O::sharpness, 0.4, 7}, {O::invert, 0.6, -1}}},
      {{{O::shear_x, 0.6, 5}, {O::equalize, 1.0, -1}}},
      {{{O::color, 0.4, 0}, {O::equalize, 0.6, -1}}},
      {{{O::equalize, 0.4, -1}, {O::solarize, 0.2, 4}}},
      {{{O::solarize, 0.6, 5}, {O::autocontrast, 0.6, -1}}},
      {{{O::invert, 0.6, -1}, {O::equalize, 1.0, -1}}},
      {{{O::color, 0.6, 4}, {O::contrast, 1.0, 8}}},
      {{{O::equalize, 0.8, -1}, {O::equalize, 0.6, -1}}},
  };
  static_assert(std::size(kPolicies) == 25, "AutoAugment(IMAGENET) has 25 sub-policies");
  return kPolicies;
}

AutoAugmentPolicy parse_auto_augment_policy(std::string_view name) {
  for (int i = 0; i < int(std::size(kPolicyNames)); ++i)
    if (name == kPolicyNames[i]) return AutoAugmentPolicy(i);
  throw UsageError("unknown auto-augment policy '" + std::string(name) +
                   "': expected one of none, imagenet, ra, ta_wide, augmix");
}

const char* auto_augment_policy_name(AutoAugmentPolicy p) {
  RT_CHECK(size_t(p) < std::size(kPolicyNames), "auto_augment_policy_name: bad policy ", int(p));
  return kPolicyNames[size_t(p)];
}

Interpolation parse_interpolation(std::string_view name) {
  for (int i = 0; i < int(std::size(kInterpolationNames)); ++i)
    if (name == kInterpolationNames[i]) return Interpolation(i);
  throw UsageError("unknown interpolation '" + std::string(name) + "': expected nearest or bilinear");
}

const char* interpolation_name(Interpolation i) {
  RT_CHECK(size_t(i) < std::size(kInterpolationNames), "interpolation_name: bad value ", int(i));
  return kInterpolationNames[size_t(i)];
}

void check_auto_augment_options(const AutoAugmentOptions& opt) {
  if (opt.ra_magnitude < 0 || opt.ra_magnitude > 30)
    throw UsageError("RandAugment magnitude " + std::to_string(opt.ra_magnitude) +
                     " is outside [0, 30] (its 31 magnitude bins)");
  if (opt.augmix_severity < 1 || opt.augmix_severity > 10)
    throw UsageError("AugMix severity " + std::to_string(opt.augmix_severity) + " is outside [1, 10]");
}

// ---- AugMix -------------------------------------------------------------------------

namespace {

// A Dirichlet(1, ..., 1) sample: Gamma(1) draws are exponential, -log(1 - u) with u in
// [0, 1); normalised in double, stored as float32 (torch._sample_dirichlet's dtype).
template <size_t N>
std::array<float, N> dirichlet_ones(Generator& g) {
  std::array<double, N> e{};
  double sum = 0.0;
  for (double& x : e) sum += x = -std::log1p(-g.uniform());
  std::array<float, N> out{};
  for (size_t i = 0; i < N; ++i) out[i] = sum > 0.0 ? float(e[i] / sum) : float(1.0 / N);
  return out;
}

}  // namespace

AugMixDraws draw_augmix(Generator& g, int severity) {
  RT_CHECK(severity >= 1 && severity <= 10, "AugMix severity ", severity, " outside [1, 10]");
  // Which ops have bins and signs does not depend on the image size.
  static const std::vector<OpSpace> s = space(AutoAugmentPolicy::augmix, 1, 1);
  AugMixDraws d;
  d.m = dirichlet_ones<2>(g);
  d.weights = dirichlet_ones<kAugMixWidth>(g);
  for (int i = 0; i < kAugMixWidth; ++i) {
    d.depth[size_t(i)] = int(g.randint(1, kAugMixMaxDepth + 1));
    for (int k = 0; k < d.depth[size_t(i)]; ++k) {
      AugMixStep& st = d.steps[size_t(i)][size_t(k)];
      st.op_index = int(g.randint(0, int64_t(s.size())));
      const OpSpace& op = s[size_t(st.op_index)];
      if (!op.bins.empty()) st.bin = int(g.randint(0, severity));
      if (op.is_signed) st.negative = g.randint(0, 2) == 1;
    }
  }
  return d;
}

void augmix_apply(uint8_t* img, int w, int h, const AugMixDraws& d, Interpolation interp) {
  const std::vector<OpSpace>& s = cached_space(AutoAugmentPolicy::augmix, w, h);
  struct Buffers {
    std::vector<float> mix;
    std::vector<uint8_t> chain;
  };
  thread_local Buffers b;
  const size_t n = size_t(w) * size_t(h) * 3;
  if (b.mix.size() < n) b.mix.resize(n), b.chain.resize(n);
  float* mix = b.mix.data();
  uint8_t* chain = b.chain.data();
  // mix = m[0] * batch, then mix.add_(combined_weights[i] * aug) per chain, all float32.
  for (size_t i = 0; i < n; ++i) mix[i] = d.m[0] * float(img[i]);
  for (int c = 0; c < kAugMixWidth; ++c) {
    std::copy(img, img + n, chain);
    for (int k = 0; k < d.depth[size_t(c)]; ++k) {
      const AugMixStep& st = d.steps[size_t(c)][size_t(k)];
      RT_CHECK(st.op_index >= 0 && size_t(st.op_index) < s.size(), "AugMix: op index ", st.op_index);
      const OpSpace& op = s[size_t(st.op_index)];
      apply_op(op.op, magnitude_of(op, st.bin, st.negative), chain, w, h, interp);
    }
    const float weight = d.weights[size_t(c)] * d.m[1];
    for (size_t i = 0; i < n; ++i) mix[i] = mix[i] + weight * float(chain[i]);
  }
  // .to(uint8): truncation; the weights sum to 1 up to float32 rounding, so a white pixel
  // may come out a hair above 255.
  for (size_t i = 0; i < n; ++i) img[i] = uint8_t(std::min(mix[i], 255.0f));
}

// ---- the whole policy ---------------------------------------------------------------

void auto_augment(uint8_t* img, int w, int h, const AutoAugmentOptions& opt, Generator& g) {
  switch (opt.policy) {
    case AutoAugmentPolicy::none:
      return;
    case AutoAugmentPolicy::imagenet: {
      const std::vector<OpSpace>& s = cached_space(opt.policy, w, h);
      const auto policies = imagenet_policies();
      const auto& pair = policies[size_t(g.randint(0, int64_t(policies.size())))];
      const double u[2] = {g.uniform(), g.uniform()};
      const bool negative[2] = {g.randint(0, 2) == 0, g.randint(0, 2) == 0};
      for (int i = 0; i < 2; ++i) {
        if (!(u[i] <= pair[size_t(i)].p)) continue;
        const SubPolicyOp& sp = pair[size_t(i)];
        const OpSpace* op = nullptr;
        for (const OpSpace& e : s)
          if (e.op == sp.op) op = &e;
        RT_CHECK(op != nullptr, "AutoAugment: ", augment_op_name(sp.op), " missing from the space");
        apply_op(sp.op, sp.bin < 0 ? 0.0 : magnitude_of(*op, sp.bin, negative[i]), img, w, h, opt.interpolation);
      }
      return;
    }
    case AutoAugmentPolicy::ra: {
      check_auto_augment_options(opt);
      const std::vector<OpSpace>& s = cached_space(opt.policy, w, h);
      for (int k = 0; k < 2; ++k) {  // num_ops = 2
        const OpSpace& op = s[size_t(g.randint(0, int64_t(s.size())))];
        const bool negative = op.is_signed && g.randint(0, 2) == 1;
        apply_op(op.op, magnitude_of(op, opt.ra_magnitude, negative), img, w, h, opt.interpolation);
      }
      return;
    }
    case AutoAugmentPolicy::ta_wide: {
      static const std::vector<OpSpace> s = space(AutoAugmentPolicy::ta_wide, 1, 1);  // its bins ignore the size
      const OpSpace& op = s[size_t(g.randint(0, int64_t(s.size())))];
      const int bin = op.bins.empty() ? 0 : int(g.randint(0, int64_t(op.bins.size())));
      const bool negative = op.is_signed && g.randint(0, 2) == 1;
      apply_op(op.op, magnitude_of(op, bin, negative), img, w, h, opt.interpolation);
      return;
    }
    case AutoAugmentPolicy::augmix:
      check_auto_augment_options(opt);
      return augmix_apply(img, w, h, draw_augmix(g, opt.augmix_severity), opt.interpolation);
  }
  RT_FAIL("auto_augment: bad policy ", int(opt.policy));
}

}  // namespace rt::data
