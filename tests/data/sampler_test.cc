// Sampler: permutations, per-epoch reshuffles as a pure function of (seed, epoch),
// drop_last, and distributed shards.
#include "data/sampler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>

#include "tests/data/data_test_util.h"

using namespace rt::data;
using namespace rt::data::test;

namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}

SamplerOptions opt(bool shuffle, uint64_t seed, bool drop_last = false, int rank = 0, int world = 1) {
  SamplerOptions o;
  o.shuffle = shuffle;
  o.seed = seed;
  o.drop_last = drop_last;
  o.rank = rank;
  o.world_size = world;
  return o;
}

}  // namespace

TEST_CASE("no shuffle: file order") {
  Sampler s(10, 4, opt(false, 9));
  CHECK(s.epoch_indices(0) == iota(10));
  CHECK(s.epoch_indices(5) == iota(10));
  CHECK(s.num_batches() == 3);
  CHECK(s.num_samples() == 10);
}

TEST_CASE("shuffle: each epoch is a permutation, epochs differ, (seed, epoch) fixes it") {
  Sampler s(100, 8, opt(true, 7));
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 5; ++e) {
    std::vector<int64_t> ix = s.epoch_indices(e);
    CHECK(ix != iota(100));
    std::vector<int64_t> sorted = ix;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == iota(100));
    for (const auto& prev : epochs) CHECK(ix != prev);
    epochs.push_back(ix);
  }
  // Another sampler with the same seed, asked out of order (as a resumed run would).
  Sampler again(100, 8, opt(true, 7));
  CHECK(again.epoch_indices(3) == epochs[3]);
  CHECK(again.epoch_indices(0) == epochs[0]);
  CHECK(Sampler(100, 8, opt(true, 8)).epoch_indices(0) != epochs[0]);
  // The batch size does not change the order, only how it is cut.
  CHECK(Sampler(100, 33, opt(true, 7)).epoch_indices(2) == epochs[2]);
}

TEST_CASE("shuffle is not biased towards the identity: position 0 takes many values") {
  std::map<int64_t, int> first;
  Sampler s(10, 1, opt(true, 1));
  for (int e = 0; e < 200; ++e) ++first[s.epoch_indices(e)[0]];
  CHECK(first.size() == 10);
  for (auto [v, n] : first) CHECK_MESSAGE(n > 5, "index ", v, " came first ", n, " times in 200 epochs");
}

TEST_CASE("drop_last drops the short final batch") {
  Sampler keep(10, 4, opt(true, 1));
  Sampler drop(10, 4, opt(true, 1, true));
  CHECK(keep.num_batches() == 3);
  CHECK(drop.num_batches() == 2);
  CHECK(drop.num_samples() == 8);
  const auto k = keep.epoch_indices(1), d = drop.epoch_indices(1);
  CHECK(d == std::vector<int64_t>(k.begin(), k.begin() + 8));
  CHECK(Sampler(12, 4, opt(true, 1, true)).num_samples() == 12);  // nothing to drop
  check_error([] { Sampler(3, 4, opt(true, 1, true)); }, {"drop_last", "one batch of 4", "lower the batch size"});
}

TEST_CASE("distributed: equal counts, shards disjoint except the padding, union complete") {
  for (int64_t n : {1, 5, 16, 37, 100}) {
    for (int world = 1; world <= 8; ++world) {
      const int64_t per_rank = (n + world - 1) / world;
      std::map<int64_t, int> times;
      int64_t batches = -1;
      for (int rank = 0; rank < world; ++rank) {
        Sampler s(n, 3, opt(true, 11, false, rank, world));
        const auto ix = s.epoch_indices(4);
        REQUIRE(int64_t(ix.size()) == per_rank);
        REQUIRE(s.num_samples() == per_rank);
        if (batches >= 0) CHECK(s.num_batches() == batches);
        batches = s.num_batches();
        for (int64_t i : ix) ++times[i];
      }
      INFO("n=", n, " world=", world);
      CHECK(int64_t(times.size()) == n);  // every example is seen
      int64_t extra = 0;
      for (auto [i, t] : times) {
        CHECK(i >= 0);
        CHECK(i < n);
        extra += t - 1;
      }
      CHECK(extra == per_rank * world - n);  // repeats are exactly the padding
    }
  }
}

TEST_CASE("distributed: ranks interleave the single-process order, padded from its start") {
  // 22 examples over 4 ranks: 6 each; positions 22 and 23 repeat positions 0 and 1
  // (as torch's DistributedSampler pads).
  const auto full = Sampler(22, 5, opt(true, 3)).epoch_indices(2);
  for (int rank = 0; rank < 4; ++rank) {
    const auto ix = Sampler(22, 5, opt(true, 3, false, rank, 4)).epoch_indices(2);
    REQUIRE(ix.size() == 6);
    for (size_t k = 0; k < ix.size(); ++k) CHECK(ix[k] == full[(size_t(rank) + 4 * k) % 22]);
  }
  // Fewer examples than ranks: the order wraps as often as needed.
  for (int rank = 0; rank < 5; ++rank)
    CHECK(Sampler(2, 1, opt(false, 0, false, rank, 5)).epoch_indices(0) == std::vector<int64_t>{rank % 2});
}

TEST_CASE("distributed with drop_last: same batch count on every rank") {
  for (int rank = 0; rank < 3; ++rank) {
    Sampler s(20, 3, opt(false, 0, true, rank, 3));  // 7 per rank -> 2 full batches
    CHECK(s.num_batches() == 2);
    CHECK(s.epoch_indices(0).size() == 6);
  }
}

TEST_CASE("bad arguments") {
  check_error([] { Sampler(0, 4); }, {"empty"});
  check_error([] { Sampler(10, 0); }, {"batch size 0"});
  check_error([] { Sampler(10, 2, opt(true, 0, false, 2, 2)); }, {"rank 2", "[0, 2)"});
  check_error([] { Sampler(10, 2, opt(true, 0, false, 0, 0)); }, {"world size 0"});
  check_error([] { Sampler(10, 2).epoch_indices(-1); }, {"epoch -1"});
}

TEST_CASE("sizes near 2^63 neither overflow nor crash") {
  const int64_t max = std::numeric_limits<int64_t>::max();
  // (size + world - 1) and (per_rank + batch - 1) would overflow: ceilings without them.
  SamplerOptions so;
  so.world_size = 4;
  Sampler s(max, max, so);
  CHECK(s.num_batches() == 1);
  CHECK(s.num_samples() == max / 4 + 1);
  CHECK(Sampler(5, max).num_batches() == 1);
  // An order of 2^62 examples cannot be held: an rt::OutOfMemory, not std::length_error.
  check_error([&] { Sampler(int64_t(1) << 62, 1).epoch_indices(0); },
              {"out of host memory for the epoch's order of 4611686018427387904 examples"});
}
