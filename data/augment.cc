#include "data/augment.h"

#include <algorithm>

#include "data/seed.h"
#include "engine/random.h"

namespace rt::data {

void augment_example(const float* src, const Shape& chw, const AugmentOptions& opt, int64_t epoch, int64_t index,
                     float* dst) {
  const int64_t C = chw[0], H = chw[1], W = chw[2];
  Generator g(derive_seed(derive_seed(derive_seed(opt.seed, kAugmentStream), uint64_t(epoch)), uint64_t(index)));
  // Always draw all three values so the stream does not depend on the options used.
  const int64_t dy = g.randint(-opt.pad, opt.pad + 1);
  const int64_t dx = g.randint(-opt.pad, opt.pad + 1);
  const bool flip = opt.flip && (g.next_u64() >> 63);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t y = 0; y < H; ++y) {
      float* out = dst + (c * H + y) * W;
      const int64_t sy = y + dy;
      if (sy < 0 || sy >= H) {
        std::fill(out, out + W, 0.0f);
        continue;
      }
      const float* row = src + (c * H + sy) * W;
      for (int64_t x = 0; x < W; ++x) {
        // Crop, then mirror the crop: output column x shows crop column W-1-x.
        const int64_t sx = (flip ? W - 1 - x : x) + dx;
        out[x] = (sx >= 0 && sx < W) ? row[sx] : 0.0f;
      }
    }
  }
}

}  // namespace rt::data
