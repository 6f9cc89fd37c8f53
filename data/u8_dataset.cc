#include "data/u8_dataset.h"

#include "engine/error.h"

namespace rt::data {

void check_index(const std::string& name, int64_t i, int64_t size) {
  RT_CHECK(i >= 0 && i < size, "dataset ", name, ": example index ", i, " is out of range [0, ", size, ")");
}

U8Dataset::U8Dataset(std::string name, Shape chw, int64_t num_classes, std::vector<uint8_t> pixels,
                     std::vector<int64_t> labels, PixelNormalizer normalizer)
    : name_(std::move(name)),
      chw_(std::move(chw)),
      num_classes_(num_classes),
      example_bytes_(shape_numel(chw_)),
      pixels_(std::move(pixels)),
      labels_(std::move(labels)),
      normalizer_(std::move(normalizer)) {
  RT_CHECK(chw_.size() == 3, "dataset ", name_, ": image shape ", shape_str(chw_), " is not {C, H, W}");
  RT_CHECK(pixels_.size() == labels_.size() * size_t(example_bytes_), "dataset ", name_, ": ", pixels_.size(),
           " pixel bytes for ", labels_.size(), " labels of images ", shape_str(chw_));
}

void U8Dataset::get(int64_t i, float* chw, int64_t* label) const {
  check_index(name_, i, size());
  normalizer_.apply(&pixels_[size_t(i * example_bytes_)], chw_[1] * chw_[2], chw);
  *label = labels_[size_t(i)];
}

}  // namespace rt::data
