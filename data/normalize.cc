#include "data/normalize.h"

#include <cmath>

#include "engine/error.h"

namespace rt::data {

namespace {
double pick(const std::vector<double>& v, int64_t c, double fallback) {
  if (v.empty()) return fallback;
  return v.size() == 1 ? v[0] : v[size_t(c)];
}
}  // namespace

PixelNormalizer::PixelNormalizer(int64_t channels, const std::vector<double>& mean, const std::vector<double>& std,
                                 const std::string& what)
    : channels_(channels), table_(size_t(channels) * 256) {
  for (const auto* v : {&mean, &std})
    RT_CHECK(v->size() <= 1 || int64_t(v->size()) == channels, what, ": normalisation ",
             v == &mean ? "mean" : "std", " has ", v->size(), " values, expected 1 or one per channel (", channels,
             ")");
  for (int64_t c = 0; c < channels; ++c) {
    const double m = pick(mean, c, 0.0), s = pick(std, c, 1.0);
    RT_CHECK(std::isfinite(m) && std::isfinite(s) && s > 0, what, ": normalisation of channel ", c, " has mean ", m,
             " and std ", s, "; expected finite values and std > 0");
    for (int v = 0; v < 256; ++v) table_[size_t(c) * 256 + size_t(v)] = float((v / 255.0 - m) / s);
  }
}

void PixelNormalizer::apply(const uint8_t* chw, int64_t plane, float* out) const {
  for (int64_t c = 0; c < channels_; ++c) {
    const float* t = &table_[size_t(c) * 256];
    const uint8_t* src = chw + c * plane;
    float* dst = out + c * plane;
    for (int64_t i = 0; i < plane; ++i) dst[i] = t[src[i]];
  }
}

}  // namespace rt::data
