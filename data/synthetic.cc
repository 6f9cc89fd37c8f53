// "synthetic": random examples for benchmarks and smoke tests, computed on demand so any
// size costs no memory. Example i of a split is a pure function of (seed, split, i).
#include <algorithm>

#include "data/datasets.h"
#include "data/seed.h"
#include "data/u8_dataset.h"
#include "engine/error.h"
#include "engine/random.h"

namespace rt::data {

namespace {

class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(const SyntheticOptions& opt, uint64_t seed) : opt_(opt), seed_(seed) {}

  int64_t size() const override { return opt_.size; }
  Shape image_shape() const override { return opt_.image_shape; }
  int64_t num_classes() const override { return opt_.num_classes; }
  std::string name() const override { return "synthetic"; }

  DType pixel_dtype() const override { return DType::f32; }
  void get(int64_t i, int64_t, void* pixels, int64_t* label) const override {
    float* chw = static_cast<float*>(pixels);
    check_index("synthetic", i, opt_.size);
    Generator g(derive_seed(seed_, uint64_t(i)));
    *label = g.randint(0, opt_.num_classes);
    // Uniform with mean 0 and variance 1 (like normalised data), four 16-bit draws per
    // random word: a benchmark must measure the model, not a Box-Muller loop.
    constexpr float kScale = 3.4641016f / 65536.0f;  // sqrt(12) / 2^16
    const int64_t n = shape_numel(opt_.image_shape);
    for (int64_t j = 0; j < n; j += 4) {
      uint64_t r = g.next_u64();
      for (int64_t k = j; k < std::min(n, j + 4); ++k, r >>= 16)
        chw[k] = (float(r & 0xffff) + 0.5f) * kScale - 1.7320508f;
    }
  }

 private:
  SyntheticOptions opt_;
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<Dataset> make_synthetic(const SyntheticOptions& opt, const std::string& split) {
  RT_CHECK(opt.size > 0, "synthetic dataset: size ", opt.size, " must be positive");
  RT_CHECK(opt.num_classes > 0, "synthetic dataset: num_classes ", opt.num_classes, " must be positive");
  RT_CHECK(opt.image_shape.size() == 3 && opt.image_shape[0] > 0 && opt.image_shape[1] > 0 && opt.image_shape[2] > 0,
           "synthetic dataset: image shape ", shape_str(opt.image_shape), " must be {C, H, W} with positive sizes");
  // The test split gets other examples than the train split under the same seed.
  const uint64_t seed = derive_seed(derive_seed(opt.seed, kSyntheticStream), split == "train" ? 0 : 1);
  return std::make_unique<SyntheticDataset>(opt, seed);
}

}  // namespace rt::data
