// One batch of examples as tensors, built from a dataset and a list of indices.
#pragma once

#include <cstdint>
#include <span>

#include "data/augment.h"
#include "data/dataset.h"
#include "engine/tensor.h"

namespace rt::data {

struct Batch {
  Tensor images;  // (N, C, H, W) f32, contiguous, CPU
  Tensor labels;  // (N) i64, CPU
  int64_t epoch = 0;
  int64_t index = 0;  // batch index within the epoch
};

// Reads `indices` from `ds` (and augments them when opt.enabled). Thread-safe.
Batch assemble_batch(const Dataset& ds, std::span<const int64_t> indices, const AugmentOptions& augment,
                     int64_t epoch, int64_t batch_index);

}  // namespace rt::data
