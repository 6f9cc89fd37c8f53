// Training augmentation: random crop from a zero-padded image, then a random horizontal
// flip (the standard CIFAR recipe). The random choices for an example come from
// (seed, epoch, dataset index), so they are the same whichever worker builds the batch.
#pragma once

#include <cstdint>

#include "engine/tensor.h"

namespace rt::data {

struct AugmentOptions {
  bool enabled = false;
  int64_t pad = 4;    // crop offsets in [-pad, pad] on each axis; 0 = no crop
  bool flip = true;   // mirror left-right with probability 1/2
  uint64_t seed = 0;
};

// Writes the augmented `src` (CHW, shape chw) to `dst` (same size, not overlapping).
// Pixels shifted in from outside the image are 0, i.e. after normalisation: the dataset's
// mean colour (torchvision pads before normalising, giving black; either is a neutral fill).
void augment_example(const float* src, const Shape& chw, const AugmentOptions& opt, int64_t epoch, int64_t index,
                     float* dst);

}  // namespace rt::data
