// An in-memory dataset of uint8 CHW images and int64 labels: what Fashion-MNIST, CIFAR-10
// and uint8 "tensors" files become once loaded. Each loader validates its format and hands
// the arrays over; this class only serves examples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/normalize.h"

namespace rt::data {

class U8Dataset final : public Dataset {
 public:
  // pixels: size N*C*H*W (N = labels.size()); labels already checked to be in range.
  U8Dataset(std::string name, Shape chw, int64_t num_classes, std::vector<uint8_t> pixels,
            std::vector<int64_t> labels, PixelNormalizer normalizer);

  int64_t size() const override { return int64_t(labels_.size()); }
  Shape image_shape() const override { return chw_; }
  int64_t num_classes() const override { return num_classes_; }
  std::string name() const override { return name_; }
  void get(int64_t i, float* chw, int64_t* label) const override;

 private:
  std::string name_;
  Shape chw_;
  int64_t num_classes_;
  int64_t example_bytes_;
  std::vector<uint8_t> pixels_;
  std::vector<int64_t> labels_;
  PixelNormalizer normalizer_;
};

// Throws naming `name` when i is not an example index of a dataset of `size`.
void check_index(const std::string& name, int64_t i, int64_t size);

}  // namespace rt::data
