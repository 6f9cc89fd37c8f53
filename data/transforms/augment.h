// Training augmentation of small in-memory images (the standard CIFAR recipe): a random
// crop from the image zero-padded by `pad` pixels (black, as torchvision's RandomCrop(pad)
// pads before normalising), then a random horizontal flip. The random choices for an
// example come from (seed, epoch, dataset index), so they are the same whichever worker
// builds the batch.
#pragma once

#include <cstdint>

#include "engine/random.h"

namespace rt::data {

struct AugmentOptions {
  bool enabled = false;
  int64_t pad = 4;    // crop offsets in [-pad, pad] on each axis; 0 = no crop
  bool flip = true;   // mirror left-right with probability 1/2
  uint64_t seed = 0;
};

// The generator of example `index`'s random choices in `epoch` under `seed`.
Generator example_generator(uint64_t seed, int64_t epoch, int64_t index);

// Writes the augmented `src` (HWC bytes, H x W x C) to `dst` (same size, not overlapping).
void augment_example(const uint8_t* src, int64_t H, int64_t W, int64_t C, const AugmentOptions& opt, int64_t epoch,
                     int64_t index, uint8_t* dst);

}  // namespace rt::data
