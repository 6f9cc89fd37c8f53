#include "data/transforms/augment.h"

#include <algorithm>
#include <cstring>

#include "data/seed.h"

namespace rt::data {

Generator example_generator(uint64_t seed, int64_t epoch, int64_t index) {
  return Generator(derive_seed(derive_seed(derive_seed(seed, kAugmentStream), uint64_t(epoch)), uint64_t(index)));
}

void augment_example(const uint8_t* src, int64_t H, int64_t W, int64_t C, const AugmentOptions& opt, int64_t epoch,
                     int64_t index, uint8_t* dst) {
  Generator g = example_generator(opt.seed, epoch, index);
  // Always draw all three values so the stream does not depend on the options used.
  const int64_t dy = g.randint(-opt.pad, opt.pad + 1);
  const int64_t dx = g.randint(-opt.pad, opt.pad + 1);
  const bool flip = opt.flip && (g.next_u64() >> 63);
  for (int64_t y = 0; y < H; ++y) {
    uint8_t* out = dst + y * W * C;
    const int64_t sy = y + dy;
    if (sy < 0 || sy >= H) {
      std::memset(out, 0, size_t(W * C));
      continue;
    }
    const uint8_t* row = src + sy * W * C;
    for (int64_t x = 0; x < W; ++x) {
      // Crop, then mirror the crop: output column x shows crop column W-1-x.
      const int64_t sx = (flip ? W - 1 - x : x) + dx;
      if (sx >= 0 && sx < W) std::memcpy(out + x * C, row + sx * C, size_t(C));
      else std::memset(out + x * C, 0, size_t(C));
    }
  }
}

}  // namespace rt::data
