// Seeds derived from coordinates. Every random choice in data/ (epoch order, synthetic
// pixels, augmentation) is a pure function of (seed, stream, epoch, index): results then
// do not depend on the number of worker threads, on which thread built a batch, or on
// where a resumed run restarted an epoch.
#pragma once

#include <cstdint>

namespace rt::data {

// splitmix64's finaliser: a bijection on 64-bit values that spreads every input bit over
// the whole output, so nearby coordinates (epoch 3 and 4) give unrelated seeds.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A seed for coordinate `a` under `seed`; chain calls for more coordinates.
inline uint64_t derive_seed(uint64_t seed, uint64_t a) { return mix64(seed ^ mix64(a)); }

// Stream tags keep the users of one user-given seed apart: the shuffle of epoch 0 and the
// augmentation of example 0 must not share random numbers.
inline constexpr uint64_t kShuffleStream = 0x7368756666'6c65ull;   // "shuffle"
inline constexpr uint64_t kAugmentStream = 0x6175676d65'6e74ull;   // "augment"
inline constexpr uint64_t kSyntheticStream = 0x73796e7468'6574ull; // "synthet"
inline constexpr uint64_t kShardStream = 0x7368617264'73ull;       // "shards"

}  // namespace rt::data
