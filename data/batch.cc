#include "data/batch.h"

#include <vector>

namespace rt::data {

Batch assemble_batch(const Dataset& ds, std::span<const int64_t> indices, const AugmentOptions& augment,
                     int64_t epoch, int64_t batch_index) {
  const Shape chw = ds.image_shape();
  const int64_t n = int64_t(indices.size()), example = shape_numel(chw);
  Batch b;
  b.epoch = epoch;
  b.index = batch_index;
  b.images = Tensor::empty({n, chw[0], chw[1], chw[2]});
  b.labels = Tensor::empty({n}, DType::i64);
  float* images = b.images.data<float>();
  int64_t* labels = b.labels.data<int64_t>();
  std::vector<float> scratch(augment.enabled ? size_t(example) : 0);
  for (int64_t k = 0; k < n; ++k) {
    float* dst = images + k * example;
    if (!augment.enabled) {
      ds.get(indices[size_t(k)], dst, &labels[k]);
      continue;
    }
    ds.get(indices[size_t(k)], scratch.data(), &labels[k]);
    augment_example(scratch.data(), chw, augment, epoch, indices[size_t(k)], dst);
  }
  return b;
}

}  // namespace rt::data
