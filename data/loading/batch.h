// One batch of examples as tensors, built from a dataset and the epoch's example order.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/datasets/dataset.h"
#include "engine/tensor.h"

namespace rt::data {

// An example that could not be read and was replaced (Note [Unreadable examples]).
struct SkippedExample {
  int64_t index = 0;   // dataset index
  std::string source;  // the file
  std::string reason;
};

struct Batch {
  // u8 datasets: (N, H, W, C) u8, raw pixels, to be normalised with `norm` on the model's
  // device (normalize_pixels); f32 datasets: (N, C, H, W) f32, already normalised.
  // On the CPU, in page-locked memory when the loader was asked to pin it.
  Tensor images;
  Tensor labels;  // (N) i64, CPU
  Normalization norm;
  int64_t epoch = 0;
  int64_t index = 0;  // batch index within the epoch
  std::vector<SkippedExample> skipped;
};

struct AssembleOptions {
  bool strict = false;      // an unreadable example is an error instead of being replaced
  bool pin_memory = false;  // images in page-locked memory (needs a CUDA device)
  int max_replacements = 64;  // per example: more unreadable examples in a row is an error
};

// Note [Unreadable examples]
// ImageNet has a few damaged files, and a user's own folders may hold anything. Example p
// of the batch is order[p]; if that one throws BadExample it is replaced by order[p + 1],
// order[p + 2], ... (wrapping around the order) until one reads, and recorded in `skipped`.
// The batch keeps its size (batch-norm statistics and step counts stay as planned), and the
// replacement is a pure function of the order, so batches stay identical for any worker
// count. With opt.strict the first unreadable example is an rt::Error naming its file.
//
// Builds the batch of positions [begin, end) of `order`. Example order[p] is drawn for
// `epoch`, or for draws[p] when given (Note [Repeated augmentation]). Thread-safe.
Batch assemble_batch(const Dataset& ds, std::span<const int64_t> order, int64_t begin, int64_t end, int64_t epoch,
                     int64_t batch_index, const AssembleOptions& opt = {}, std::span<const int64_t> draws = {});

}  // namespace rt::data
