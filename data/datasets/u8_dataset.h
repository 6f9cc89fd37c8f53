// An in-memory dataset of uint8 images and int64 labels: what Fashion-MNIST, CIFAR-10 and
// uint8 "tensors" files become once loaded. Each loader validates its format and hands
// the arrays over (CHW, as those files store them); this class keeps them HWC, the
// loader's batch layout, and serves (optionally augmented) examples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/datasets/dataset.h"

namespace rt::data {

class U8Dataset final : public Dataset {
 public:
  // pixels_chw: N*C*H*W bytes, image after image, each CHW (N = labels.size()); labels in
  // [0, num_classes) (the format's loader checks them naming the file; checked here again).
  // `augment` applies when augment.enabled. `location`: the file or folder, for messages.
  U8Dataset(std::string name, Shape chw, int64_t num_classes, const std::vector<uint8_t>& pixels_chw,
            std::vector<int64_t> labels, Normalization norm, AugmentOptions augment, std::string location = "");

  int64_t size() const override { return int64_t(labels_.size()); }
  Shape image_shape() const override { return chw_; }
  int64_t num_classes() const override { return num_classes_; }
  std::string name() const override { return name_; }
  Normalization normalization() const override { return norm_; }
  void get(int64_t i, int64_t epoch, void* pixels, int64_t* label) const override;
  int64_t label(int64_t i) const override;
  std::string location() const override { return location_; }

 private:
  std::string name_;
  std::string location_;
  Shape chw_;
  int64_t num_classes_;
  int64_t example_bytes_;
  std::vector<uint8_t> pixels_;  // N x H x W x C
  std::vector<int64_t> labels_;
  Normalization norm_;
  AugmentOptions augment_;
};

// Throws naming `name` when i is not an example index of a dataset of `size`.
void check_index(const std::string& name, int64_t i, int64_t size);

// Note [Label range] at open time: throws "<what>: label L of example i is outside [0,
// num_classes)<why>" for the first label outside the range. `what` names the file.
template <typename Label>
void check_label_range(const std::vector<Label>& labels, int64_t num_classes, const std::string& what,
                       const std::string& why = "") {
  for (size_t i = 0; i < labels.size(); ++i)
    RT_CHECK(labels[i] >= 0 && int64_t(labels[i]) < num_classes, what, ": label ", int64_t(labels[i]), " of example ",
             i, " is outside [0, ", num_classes, ")", why);
}

// Checks a Normalization for `channels` channels (1 or `channels` finite values, std > 0);
// `what` names the source in the error.
void check_normalization(const Normalization& n, int64_t channels, const std::string& what);

}  // namespace rt::data
