// A user's dataset in a file of its own, registered by name: `ringtape_example train --dataset
// levels` trains on it with every flag of `ringtape train` (examples/BUILD links this file with
// the ringtape command line; nothing in data/, train/ or cli/ changes). Its images are computed:
// example i is uniform grey at one of four brightness levels, its class, with noise on every
// pixel, so a small model learns it in a few steps and its accuracy shows that it did.
#include <cstdint>
#include <memory>
#include <string>

#include "base/error.h"
#include "data/datasets/dataset_registry.h"

namespace example {
namespace {

constexpr int64_t kLevels = 4;  // the classes: mean pixel 32, 96, 160, 224
constexpr int64_t kNoise = 24;  // each pixel is its level +- up to this

// splitmix64: one well-mixed 64-bit value per input.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class LevelsDataset : public rt::data::Dataset {
 public:
  // `opt`: the generated datasets' options (--synthetic-size gives N x C x H x W, --seed the
  // seed); the test split draws other noise than the training split.
  LevelsDataset(const rt::data::SyntheticOptions& opt, const std::string& split)
      : size_(opt.size), shape_(opt.image_shape), seed_(mix(opt.seed) ^ (split == "train" ? 0 : 1)) {}

  int64_t size() const override { return size_; }
  rt::Shape image_shape() const override { return shape_; }
  int64_t num_classes() const override { return kLevels; }
  std::string name() const override { return "levels"; }
  int64_t label(int64_t i) const override { return i % kLevels; }

  // The same example in every epoch (nothing is augmented): H*W*C bytes, HWC.
  void get(int64_t i, int64_t /*epoch*/, void* pixels, int64_t* label_out) const override {
    RT_CHECK(i >= 0 && i < size_, "levels: example ", i, " is outside [0, ", size_, ")");
    const int64_t level = 32 + 64 * label(i);
    auto* out = static_cast<uint8_t*>(pixels);
    const int64_t n = shape_[0] * shape_[1] * shape_[2];
    for (int64_t k = 0; k < n; ++k) {
      const uint64_t r = mix(seed_ ^ mix(uint64_t(i) * uint64_t(n) + uint64_t(k)));
      out[k] = uint8_t(level - kNoise + int64_t(r % uint64_t(2 * kNoise + 1)));
    }
    *label_out = label(i);
  }

 private:
  int64_t size_;
  rt::Shape shape_;
  uint64_t seed_;
};

}  // namespace
}  // namespace example

// Generated (like "synthetic"), so the command line checks --synthetic-size for it too; its own
// checks are the factory's.
RT_REGISTER_DATASET("levels", [](::rt::data::DatasetEntry& e) {
  e.generated = true;
  e.open = [](const std::string&, const std::string& split, const rt::data::DatasetOptions& o)
      -> std::unique_ptr<rt::data::Dataset> {
    const rt::data::SyntheticOptions& s = o.synthetic;
    RT_CHECK(s.size > 0 && s.image_shape.size() == 3 && s.image_shape[0] > 0 &&
                 s.image_shape[1] > 0 && s.image_shape[2] > 0,
             "dataset levels: ", s.size, " images of ", rt::shape_str(s.image_shape),
             ": give a positive count and {C, H, W} with --synthetic-size NxCxHxW");
    return std::make_unique<example::LevelsDataset>(s, split);
  };
});
