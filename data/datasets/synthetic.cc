// "synthetic": random examples for benchmarks and smoke tests, computed on demand so any
// size costs no memory. Example i of a split is a pure function of (seed, split, i).
#include <algorithm>
#include <vector>

#include "data/datasets/dataset_registry.h"
#include "data/seed.h"
#include "data/datasets/u8_dataset.h"
#include "base/error.h"
#include "engine/random.h"

namespace rt::data {

namespace {

class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(const SyntheticOptions& opt, uint64_t seed, const AugmentOptions& augment)
      : opt_(opt), seed_(seed), augment_(augment) {}

  int64_t size() const override { return opt_.size; }
  Shape image_shape() const override { return opt_.image_shape; }
  int64_t num_classes() const override { return opt_.num_classes; }
  std::string name() const override { return "synthetic"; }
  // Uniform bytes have mean 127.5 and std 73.9 (of 255): normalised, mean 0 and variance 1
  // (up to the 1/256 quantisation), like real normalised data.
  Normalization normalization() const override { return {{0.5}, {0.28867513}}; }

  // The label is the generator's first draw: label(i) is what get(i) writes.
  int64_t label(int64_t i) const override {
    check_index("synthetic", i, opt_.size);
    Generator g(derive_seed(seed_, uint64_t(i)));
    return g.randint(0, opt_.num_classes);
  }

  void get(int64_t i, int64_t epoch, void* pixels, int64_t* label) const override {
    check_index("synthetic", i, opt_.size);
    Generator g(derive_seed(seed_, uint64_t(i)));
    *label = g.randint(0, opt_.num_classes);
    // Eight bytes per random word: a benchmark must measure the model, not the data.
    const int64_t n = shape_numel(opt_.image_shape);
    uint8_t* out = augment_.enabled ? scratch(n) : static_cast<uint8_t*>(pixels);
    for (int64_t j = 0; j < n; j += 8) {
      uint64_t r = g.next_u64();
      for (int64_t k = j; k < std::min(n, j + 8); ++k, r >>= 8) out[k] = uint8_t(r);
    }
    if (augment_.enabled)
      augment_example(out, opt_.image_shape[1], opt_.image_shape[2], opt_.image_shape[0], augment_, epoch, i,
                      static_cast<uint8_t*>(pixels));
  }

 private:
  static uint8_t* scratch(int64_t n) {
    thread_local std::vector<uint8_t> buf;
    buf.resize(size_t(n));
    return buf.data();
  }

  SyntheticOptions opt_;
  uint64_t seed_;
  AugmentOptions augment_;
};

std::unique_ptr<Dataset> make_synthetic(const SyntheticOptions& opt, const std::string& split,
                                        const AugmentOptions& augment) {
  RT_CHECK(opt.size > 0, "synthetic dataset: size ", opt.size, " must be positive");
  RT_CHECK(opt.num_classes > 0, "synthetic dataset: num_classes ", opt.num_classes, " must be positive");
  RT_CHECK(opt.image_shape.size() == 3 && opt.image_shape[0] > 0 && opt.image_shape[1] > 0 && opt.image_shape[2] > 0,
           "synthetic dataset: image shape ", shape_str(opt.image_shape), " must be {C, H, W} with positive sizes");
  try {
    shape_nbytes(opt.image_shape, DType::u8);
  } catch (const Error& e) {
    RT_FAIL("synthetic dataset: image ", e.what(), "; use smaller images");
  }
  // The test split gets other examples than the train split under the same seed.
  const uint64_t seed = derive_seed(derive_seed(opt.seed, kSyntheticStream), split == "train" ? 0 : 1);
  return std::make_unique<SyntheticDataset>(opt, seed, augment);
}

}  // namespace

RT_REGISTER_DATASET("synthetic", [](::rt::data::DatasetEntry& e) {
  e.order = 50;
  e.generated = true;
  e.open = [](const std::string&, const std::string& split, const DatasetOptions& o) {
    return make_synthetic(o.synthetic, split, o.augment);
  };
});

}  // namespace rt::data
