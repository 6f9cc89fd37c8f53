#include "data/datasets/u8_dataset.h"

#include <cmath>
#include <cstring>

#include "base/error.h"

namespace rt::data {

void check_index(const std::string& name, int64_t i, int64_t size) {
  RT_CHECK(i >= 0 && i < size, "dataset ", name, ": example index ", i, " is out of range [0, ", size, ")");
}

void check_normalization(const Normalization& n, int64_t channels, const std::string& what) {
  for (const auto* v : {&n.mean, &n.std})
    RT_CHECK(v->size() == 1 || int64_t(v->size()) == channels, what, ": normalisation ", v == &n.mean ? "mean" : "std",
             " has ", v->size(), " values, expected 1 or one per channel (", channels, ")");
  for (size_t c = 0; c < std::max(n.mean.size(), n.std.size()); ++c) {
    const double m = n.mean[n.mean.size() == 1 ? 0 : c], s = n.std[n.std.size() == 1 ? 0 : c];
    RT_CHECK(std::isfinite(m) && std::isfinite(s) && s > 0, what, ": normalisation of channel ", c, " has mean ", m,
             " and std ", s, "; expected finite values and std > 0");
  }
}

U8Dataset::U8Dataset(std::string name, Shape chw, int64_t num_classes, const std::vector<uint8_t>& pixels_chw,
                     std::vector<int64_t> labels, Normalization norm, AugmentOptions augment, std::string location)
    : name_(std::move(name)),
      location_(std::move(location)),
      chw_(std::move(chw)),
      num_classes_(num_classes),
      example_bytes_(shape_numel(chw_)),
      labels_(std::move(labels)),
      norm_(std::move(norm)),
      augment_(augment) {
  RT_CHECK(chw_.size() == 3, "dataset ", name_, ": image shape ", shape_str(chw_), " is not {C, H, W}");
  // N * example bytes cannot overflow: the pixels are in memory.
  RT_CHECK(pixels_chw.size() == labels_.size() * size_t(example_bytes_), "dataset ", name_, ": ", pixels_chw.size(),
           " pixel bytes for ", labels_.size(), " labels of images ", shape_str(chw_));
  RT_CHECK(num_classes_ > 0, "dataset ", name_, ": ", num_classes_, " classes; expected at least 1");
  check_label_range(labels_, num_classes_,
                    "dataset " + name_ + (location_.empty() ? "" : " ('" + location_ + "')"));
  RT_CHECK(!augment_.enabled || augment_.pad >= 0, "dataset ", name_, ": augmentation pad ", augment_.pad,
           " must be >= 0");
  check_normalization(norm_, chw_[0], "dataset " + name_);
  const int64_t C = chw_[0], plane = chw_[1] * chw_[2];
  if (C == 1) {
    pixels_ = pixels_chw;
    return;
  }
  pixels_.resize(pixels_chw.size());
  for (size_t n = 0; n < labels_.size(); ++n) {
    const uint8_t* src = &pixels_chw[n * size_t(example_bytes_)];
    uint8_t* dst = &pixels_[n * size_t(example_bytes_)];
    for (int64_t p = 0; p < plane; ++p)
      for (int64_t c = 0; c < C; ++c) dst[p * C + c] = src[c * plane + p];
  }
}

int64_t U8Dataset::label(int64_t i) const {
  check_index(name_, i, size());
  return labels_[size_t(i)];
}

void U8Dataset::get(int64_t i, int64_t epoch, void* pixels, int64_t* label) const {
  check_index(name_, i, size());
  const uint8_t* src = &pixels_[size_t(i * example_bytes_)];
  auto* dst = static_cast<uint8_t*>(pixels);
  if (augment_.enabled) augment_example(src, chw_[1], chw_[2], chw_[0], augment_, epoch, i, dst);
  else std::memcpy(dst, src, size_t(example_bytes_));
  *label = labels_[size_t(i)];
}

}  // namespace rt::data
