// Augmentation: every output is some crop-and-flip of the input (checked against a
// padded-image reference), choices cover the whole range, and depend only on
// (seed, epoch, index).
#include "data/transforms/augment.h"

#include <doctest/doctest.h>

#include <set>
#include <tuple>
#include <vector>

using namespace rt::data;

namespace {

constexpr int64_t C = 2, H = 5, W = 4, P = 2;

// HWC bytes, distinct and non-zero.
std::vector<uint8_t> image() {
  std::vector<uint8_t> v(C * H * W);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i + 1);
  return v;
}

// The textbook recipe: zero-pad by P, cut an H x W window at (top, left), mirror it.
std::vector<uint8_t> reference(const std::vector<uint8_t>& src, int64_t top, int64_t left, bool flip) {
  const int64_t PH = H + 2 * P, PW = W + 2 * P;
  std::vector<uint8_t> padded(C * PH * PW, 0), out(C * H * W);
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x)
      for (int64_t c = 0; c < C; ++c) padded[((y + P) * PW + x + P) * C + c] = src[(y * W + x) * C + c];
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x)
      for (int64_t c = 0; c < C; ++c)
        out[(y * W + (flip ? W - 1 - x : x)) * C + c] = padded[((top + y) * PW + left + x) * C + c];
  return out;
}

std::vector<uint8_t> augmented(const AugmentOptions& o, int64_t epoch, int64_t index) {
  const std::vector<uint8_t> src = image();
  std::vector<uint8_t> out(src.size(), 0xAB);
  augment_example(src.data(), H, W, C, o, epoch, index, out.data());
  return out;
}

AugmentOptions opts(bool flip, int64_t pad = P) {
  AugmentOptions o;
  o.enabled = true;
  o.pad = pad;
  o.flip = flip;
  o.seed = 3;
  return o;
}

}  // namespace

TEST_CASE("each output is exactly one crop/flip of the zero-padded input; all of them occur") {
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  for (int64_t index = 0; index < 600; ++index) {
    const std::vector<uint8_t> out = augmented(opts(true), 0, index);
    int matches = 0;
    for (int64_t top = 0; top <= 2 * P; ++top)
      for (int64_t left = 0; left <= 2 * P; ++left)
        for (bool flip : {false, true})
          if (reference(image(), top, left, flip) == out) {
            ++matches;
            seen.insert({top, left, flip});
          }
    REQUIRE_MESSAGE(matches == 1, "index ", index, ": matches ", matches, " crop/flip choices");
  }
  CHECK(seen.size() == size_t((2 * P + 1) * (2 * P + 1) * 2));
}

TEST_CASE("pad 0 without flip is the identity; flip only mirrors") {
  for (int64_t i = 0; i < 20; ++i) CHECK(augmented(opts(false, 0), 1, i) == image());
  int flipped = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const auto out = augmented(opts(true, 0), 1, i);
    if (out == image()) continue;
    CHECK(out == reference(image(), P, P, true));
    ++flipped;
  }
  CHECK(flipped > 5);
  CHECK(flipped < 35);
}

TEST_CASE("choices depend on (seed, epoch, index) only") {
  CHECK(augmented(opts(true), 2, 7) == augmented(opts(true), 2, 7));
  int epoch_differs = 0, index_differs = 0, seed_differs = 0;
  AugmentOptions other = opts(true);
  other.seed = 4;
  for (int64_t i = 0; i < 30; ++i) {
    epoch_differs += augmented(opts(true), 2, i) != augmented(opts(true), 3, i);
    index_differs += augmented(opts(true), 2, i) != augmented(opts(true), 2, i + 1);
    seed_differs += augmented(opts(true), 2, i) != augmented(other, 2, i);
  }
  // 50 equally likely choices: a few coincidences are fine, most must differ.
  CHECK(epoch_differs > 20);
  CHECK(index_differs > 20);
  CHECK(seed_differs > 20);
}
