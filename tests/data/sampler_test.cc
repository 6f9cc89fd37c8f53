// Sampler: permutations, per-epoch reshuffles as a pure function of (seed, epoch),
// drop_last, and distributed shards.
#include "data/loading/sampler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>

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

TEST_CASE("torch_randperm is torch.randperm after manual_seed (torch 1.13, CPU)") {
  // torch.randperm(10, generator=torch.Generator().manual_seed(5)).tolist()
  CHECK(torch_randperm(10, 5) == std::vector<int64_t>{1, 4, 9, 6, 3, 5, 0, 2, 8, 7});
  CHECK(torch_randperm(1, 3) == std::vector<int64_t>{0});
}

// Note [Repeated augmentation]. The expected values are written by
// tests/data/gen_ra_sampler_golden.py from RASampler's own code on torch's randperm.
TEST_CASE("repeated augmentation: every rank's indices are torchvision's RASampler's") {
  struct Case {
    int64_t n;
    int world, reps;
    uint64_t seed;
    int64_t epoch;
    bool shuffle;
    int rank;
    int64_t count, weighted;  // len(ix), sum((k + 1) * ix[k])
    std::vector<int64_t> head;
  };
  const Case cases[] = {
      {600, 3, 3, 5, 2, true, 0, 170, 4481080, {15, 166, 19, 584, 355, 527, 149, 186, 596, 323, 338, 538}},
      {600, 3, 3, 5, 2, true, 1, 170, 4481080, {15, 166, 19, 584, 355, 527, 149, 186, 596, 323, 338, 538}},
      {600, 3, 3, 5, 2, true, 2, 170, 4481080, {15, 166, 19, 584, 355, 527, 149, 186, 596, 323, 338, 538}},
      {300, 2, 4, 0, 0, true, 0, 128, 1321441, {44, 44, 120, 120, 71, 71, 270, 270, 111, 111, 139, 139}},
      {300, 2, 4, 0, 0, true, 1, 128, 1321441, {44, 44, 120, 120, 71, 71, 270, 270, 111, 111, 139, 139}},
      {513, 5, 2, 9, 1, false, 0, 102, 882929, {0, 2, 5, 7, 10, 12, 15, 17, 20, 22, 25, 27}},
      {513, 5, 2, 9, 1, false, 1, 102, 885581, {0, 3, 5, 8, 10, 13, 15, 18, 20, 23, 25, 28}},
      {513, 5, 2, 9, 1, false, 2, 102, 888182, {1, 3, 6, 8, 11, 13, 16, 18, 21, 23, 26, 28}},
      {513, 5, 2, 9, 1, false, 3, 102, 890834, {1, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 29}},
      {513, 5, 2, 9, 1, false, 4, 102, 893435, {2, 4, 7, 9, 12, 14, 17, 19, 22, 24, 27, 29}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.n);
    CAPTURE(c.rank);
    SamplerOptions o = opt(c.shuffle, c.seed, false, c.rank, c.world);
    o.repetitions = c.reps;
    const Sampler s(c.n, 1, o);
    const std::vector<int64_t> ix = s.epoch_indices(c.epoch);
    REQUIRE(int64_t(ix.size()) == c.count);
    CHECK(s.num_samples() == c.count);
    int64_t weighted = 0;
    for (size_t k = 0; k < ix.size(); ++k) weighted += int64_t(k + 1) * ix[k];
    CHECK(weighted == c.weighted);
    CHECK(std::vector<int64_t>(ix.begin(), ix.begin() + 12) == c.head);
  }
}

TEST_CASE("repeated augmentation: the copies of an image are drawn apart") {
  SamplerOptions o = opt(true, 1, false, 0, 1);
  o.repetitions = 3;
  const Sampler s(512, 4, o);
  const auto ix = s.epoch_indices(4), draws = s.epoch_draws(4);
  REQUIRE(draws.size() == ix.size());
  std::map<int64_t, std::vector<int64_t>> by_image;  // image -> the draws of its copies
  for (size_t k = 0; k < ix.size(); ++k) by_image[ix[k]].push_back(draws[k]);
  for (const auto& [image, d] : by_image) {
    CAPTURE(image);
    for (size_t a = 0; a < d.size(); ++a) {
      CHECK(d[a] >= 4 * 3);
      CHECK(d[a] < 5 * 3);  // epoch 4's coordinates: 12, 13, 14
      for (size_t b = 0; b < a; ++b) CHECK(d[a] != d[b]);
    }
  }
  // Without repetitions every draw is the epoch.
  const auto plain = Sampler(10, 2, opt(true, 1)).epoch_draws(3);
  CHECK(plain == std::vector<int64_t>(10, 3));
  SamplerOptions small = opt(true, 1, false, 0, 2);
  small.repetitions = 3;
  check_error([&] { Sampler(255, 1, small); }, {"repeated augmentation", "none for 255 examples over 2 ranks"});
}

// Sharded datasets (Note [Shard order]).
namespace {

SamplerOptions sharded(std::vector<int64_t> sizes, bool shuffle, int64_t buffer, int rank = 0, int world = 1,
                       uint64_t seed = 3) {
  SamplerOptions o = opt(shuffle, seed, false, rank, world);
  o.shard_sizes = std::move(sizes);
  o.shuffle_buffer = buffer;
  return o;
}

int64_t total(const std::vector<int64_t>& sizes) { return std::accumulate(sizes.begin(), sizes.end(), int64_t(0)); }

// The epoch's stream (step 1): one rank, no buffer.
std::vector<int64_t> stream_of(const std::vector<int64_t>& sizes, bool shuffle, int64_t epoch, uint64_t seed = 3) {
  return Sampler(total(sizes), 1, sharded(sizes, shuffle, 0, 0, 1, seed)).epoch_indices(epoch);
}

}  // namespace

TEST_CASE("shard order: one rank without shuffling reads the shards in file order") {
  const std::vector<int64_t> sizes = {4, 0, 3, 5};
  CHECK(stream_of(sizes, false, 0) == iota(12));
  CHECK(stream_of(sizes, false, 7) == iota(12));
}

TEST_CASE("shard order: shuffling permutes whole shards, each read in file order, per (seed, epoch)") {
  const std::vector<int64_t> sizes = {3, 5, 1, 4, 2, 6};
  const std::vector<int64_t> first = {0, 3, 8, 9, 13, 15};
  std::set<std::vector<int64_t>> seen;
  for (int64_t epoch = 0; epoch < 6; ++epoch) {
    const std::vector<int64_t> s = stream_of(sizes, true, epoch);
    CHECK(s == stream_of(sizes, true, epoch));  // a pure function of (seed, epoch)
    std::vector<int64_t> sorted = s;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == iota(21));
    // Runs of consecutive indices, each a whole shard.
    for (size_t p = 0; p < s.size();) {
      const auto k = size_t(std::find(first.begin(), first.end(), s[p]) - first.begin());
      REQUIRE(k < first.size());
      for (int64_t j = 0; j < sizes[k]; ++j) CHECK(s[p + size_t(j)] == first[k] + j);
      p += size_t(sizes[k]);
    }
    seen.insert(s);
  }
  CHECK(seen.size() >= 4);  // epochs differ
  CHECK(stream_of(sizes, true, 0, 3) != stream_of(sizes, true, 0, 4));
}

TEST_CASE("shard order: every example once per epoch across 1, 2, 3 ranks and 2 nodes, repeats documented") {
  const std::vector<int64_t> sizes = {7, 1, 0, 9, 4, 12, 3, 5};  // 41 examples, uneven shards
  const int64_t n = total(sizes);
  for (const int world : {1, 2, 3, 4, 6, 41, 50}) {
    CAPTURE(world);
    for (const int64_t buffer : {0, 5}) {
      const int64_t per_rank = (n + world - 1) / world;
      const std::vector<int64_t> stream = stream_of(sizes, true, 2);
      std::map<int64_t, int> count;
      std::vector<int64_t> node_last(2, -1);
      for (int r = 0; r < world; ++r) {
        const Sampler s(n, 4, sharded(sizes, true, buffer, r, world));
        const std::vector<int64_t> mine = s.epoch_indices(2);
        REQUIRE(int64_t(mine.size()) == per_rank);
        CHECK(s.num_batches() == (per_rank + 3) / 4);
        // Step 2: before the buffer, the rank's examples are a contiguous part of the stream,
        // then its repeat.
        const std::vector<int64_t> plain = Sampler(n, 4, sharded(sizes, true, 0, r, world)).epoch_indices(2);
        const int64_t own = n / world + (r < n % world ? 1 : 0), start = r * (n / world) + std::min<int64_t>(r, n % world);
        for (int64_t k = 0; k < own; ++k) CHECK(plain[size_t(k)] == stream[size_t(start + k)]);
        if (own < per_rank) CHECK(plain.back() == (own > 0 ? plain.front() : stream[size_t(r % n)]));
        // The buffer reorders the same examples.
        std::vector<int64_t> a = mine, b = plain;
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        CHECK(a == b);
        for (const int64_t i : mine) ++count[i];
      }
      // Every example at least once; exactly world * per_rank - n repeats, each seen twice.
      REQUIRE(int64_t(count.size()) == n);
      int64_t twice = 0;
      for (const auto& [i, c] : count) {
        CHECK(c >= 1);
        CHECK(c <= 2);
        twice += c == 2;
      }
      if (world <= n) CHECK(twice == world * per_rank - n);
    }
  }
  // Two nodes of two ranks (RANK = node * 2 + local rank): each node reads one contiguous
  // half of the stream, so the nodes share at most the shard on their boundary.
  const std::vector<int64_t> stream = stream_of(sizes, true, 0);
  std::set<int64_t> node0, node1;
  for (int r = 0; r < 4; ++r)
    for (const int64_t i : Sampler(n, 1, sharded(sizes, true, 0, r, 4)).epoch_indices(0)) (r < 2 ? node0 : node1).insert(i);
  const std::set<int64_t> first_half(stream.begin(), stream.begin() + 21), second_half(stream.begin() + 21, stream.end());
  CHECK(node0 == first_half);
  CHECK(node1 == second_half);
}

TEST_CASE("shard order: the shuffle buffer keeps reads sequential and mixes within its reach") {
  const std::vector<int64_t> sizes = {50, 50, 50, 50};
  for (const int64_t buffer : {2, 8, 64, 1000}) {
    CAPTURE(buffer);
    const std::vector<int64_t> plain = Sampler(200, 1, sharded(sizes, true, 0)).epoch_indices(1);
    const std::vector<int64_t> mixed = Sampler(200, 1, sharded(sizes, true, buffer)).epoch_indices(1);
    CHECK(mixed == Sampler(200, 1, sharded(sizes, true, buffer)).epoch_indices(1));  // exact resume
    CHECK(mixed != plain);
    std::map<int64_t, int64_t> pos;  // stream position of each example
    for (size_t q = 0; q < plain.size(); ++q) pos[plain[q]] = int64_t(q);
    // The example emitted at position p was read at stream position p + B - 1 at the latest.
    int64_t ahead = 0;
    for (size_t p = 0; p < mixed.size(); ++p) {
      CHECK(pos[mixed[p]] <= int64_t(p) + buffer - 1);
      ahead = std::max(ahead, pos[mixed[p]] - int64_t(p));
    }
    if (buffer < 100) CHECK(ahead == buffer - 1);  // the bound is reached
  }
  // Without shuffling (evaluation) the buffer is not used.
  CHECK(Sampler(200, 1, sharded(sizes, false, 64)).epoch_indices(0) == iota(200));
}

TEST_CASE("shard order: bad shard layouts and repeated augmentation are refused") {
  check_error([] { Sampler(10, 2, sharded({4, 5}, true, 0)); }, {"shards hold 9", "dataset has 10"});
  check_error([] { Sampler(9, 2, sharded({4, -1, 6}, true, 0)); }, {"shard of -1"});
  SamplerOptions ra = sharded({4, 5}, true, 0);
  ra.repetitions = 3;
  check_error([&] { Sampler(9, 2, ra); }, {"--ra-sampler", "webdataset"});
}
