#include "data/loading/sampler.h"

#include <numeric>
#include <random>

#include "data/seed.h"
#include "base/error.h"
#include "engine/random.h"

namespace rt::data {

Sampler::Sampler(int64_t dataset_size, int64_t batch_size, const SamplerOptions& opt)
    : dataset_size_(dataset_size), batch_size_(batch_size), opt_(opt) {
  RT_CHECK(dataset_size > 0, "sampler: the dataset is empty (", dataset_size, " examples); check the dataset's path");
  RT_CHECK(batch_size > 0, "sampler: batch size ", batch_size, " must be positive");
  RT_CHECK(opt.world_size >= 1, "sampler: world size ", opt.world_size, " must be >= 1");
  RT_CHECK(opt.rank >= 0 && opt.rank < opt.world_size, "sampler: rank ", opt.rank, " must be in [0, ",
           opt.world_size, ") for world size ", opt.world_size);
  RT_CHECK(opt.repetitions >= 0, "sampler: repetitions ", opt.repetitions, " must be >= 0 (0 = none)");
  if (!opt.shard_sizes.empty()) {
    int64_t total = 0;
    for (const int64_t n : opt.shard_sizes) {
      RT_CHECK(n >= 0, "sampler: a shard of ", n, " examples");
      total += n;
    }
    RT_CHECK(total == dataset_size, "sampler: the shards hold ", total, " examples but the dataset has ",
             dataset_size);
    RT_CHECK(opt.repetitions == 0, "sampler: repeated augmentation (--ra-sampler) draws from a permutation of all "
             "examples, which sequentially read shards (--dataset webdataset) do not have; turn it off with "
             "--ra-sampler false (a --recipe may have set it) or use --dataset imagenet");
    RT_CHECK(opt.shuffle_buffer >= 0, "sampler: shuffle buffer ", opt.shuffle_buffer, " must be >= 0");
  }
  // Ceiling divisions written so that sizes near 2^63 cannot overflow.
  per_rank_ = (dataset_size - 1) / opt.world_size + 1;
  if (opt.repetitions > 0) {  // RASampler's num_selected_samples (Note [Repeated augmentation])
    per_rank_ = dataset_size / 256 * 256 / opt.world_size;
    RT_CHECK(per_rank_ > 0, "sampler: repeated augmentation uses floor(N / 256) * 256 / world_size examples per "
             "rank (torchvision's RASampler), none for ", dataset_size, " examples over ", opt.world_size,
             " ranks; it needs at least ", (opt.world_size + 255) / 256 * 256,
             " examples here, or repeated augmentation off");
  }
  num_batches_ = opt.drop_last ? per_rank_ / batch_size : (per_rank_ - 1) / batch_size + 1;
  num_samples_ = opt.drop_last ? num_batches_ * batch_size : per_rank_;
  RT_CHECK(num_batches_ > 0, "sampler: with drop_last, ", per_rank_, " examples per rank (", dataset_size,
           " over ", opt.world_size, " ranks) do not fill one batch of ", batch_size,
           "; lower the batch size or the number of processes (training batches are always full: the short "
           "last one is dropped)");
}

std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed) {
  std::vector<int64_t> r(size_t(std::max<int64_t>(n, 0)));
  std::iota(r.begin(), r.end(), int64_t(0));
  std::mt19937 mt(uint32_t(seed & 0xffffffffu));
  for (int64_t i = 0; i + 1 < n; ++i) std::swap(r[size_t(i)], r[size_t(i + int64_t(mt() % uint64_t(n - i)))]);
  return r;
}

std::vector<int64_t> Sampler::shard_order(int64_t epoch) const {
  const std::vector<int64_t>& sizes = opt_.shard_sizes;
  const int64_t shards = int64_t(sizes.size());
  std::vector<int64_t> first(sizes.size());  // index of each shard's first example
  for (int64_t s = 1; s < shards; ++s) first[size_t(s)] = first[size_t(s - 1)] + sizes[size_t(s - 1)];
  // 1. The shards' order.
  std::vector<int64_t> perm(sizes.size());
  std::iota(perm.begin(), perm.end(), int64_t(0));
  if (opt_.shuffle) {
    Generator g(derive_seed(derive_seed(opt_.seed, kShardStream), uint64_t(epoch)));
    for (int64_t i = shards - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[size_t(g.randint(0, i + 1))]);
  }
  // Stream position p -> example index, walking the permuted shards.
  auto at = [&](int64_t p) {
    for (const int64_t s : perm) {
      if (p < sizes[size_t(s)]) return first[size_t(s)] + p;
      p -= sizes[size_t(s)];
    }
    RT_FAIL("sampler: stream position past the end");  // unreachable: p < N
  };
  // 2. and 3. This rank's range, then its repeat.
  const int64_t n = dataset_size_, w = opt_.world_size, r = opt_.rank;
  const int64_t count = n / w + (r < n % w ? 1 : 0), start = r * (n / w) + std::min(r, n % w);
  std::vector<int64_t> stream;
  stream.reserve(size_t(per_rank_));
  if (count > 0) {
    int64_t p = start, s = 0;
    while (p >= sizes[size_t(perm[size_t(s)])]) p -= sizes[size_t(perm[size_t(s++)])];
    while (int64_t(stream.size()) < count) {  // the shards from (s, p) on, in order
      const int64_t shard = perm[size_t(s)];
      for (; p < sizes[size_t(shard)] && int64_t(stream.size()) < count; ++p) stream.push_back(first[size_t(shard)] + p);
      p = 0;
      ++s;
    }
  }
  if (count < per_rank_) stream.push_back(count > 0 ? stream.front() : at(r % n));
  // 4. The shuffle buffer.
  const int64_t b = opt_.shuffle_buffer;
  if (!opt_.shuffle || b <= 1) return stream;
  Generator g(derive_seed(derive_seed(derive_seed(opt_.seed, kShardStream), uint64_t(epoch)), uint64_t(r) + 1));
  std::vector<int64_t> buffer, out;
  buffer.reserve(size_t(std::min<int64_t>(b, int64_t(stream.size()))));
  out.reserve(stream.size());
  for (const int64_t x : stream) {
    if (int64_t(buffer.size()) < b) {
      buffer.push_back(x);
      continue;
    }
    const size_t k = size_t(g.randint(0, b));
    out.push_back(buffer[k]);
    buffer[k] = x;
  }
  for (int64_t i = int64_t(buffer.size()) - 1; i > 0; --i) std::swap(buffer[size_t(i)], buffer[size_t(g.randint(0, i + 1))]);
  out.insert(out.end(), buffer.begin(), buffer.end());
  return out;
}

std::vector<int64_t> Sampler::order_for(int64_t epoch, std::vector<int64_t>* draws) const {
  RT_CHECK(epoch >= 0, "sampler: epoch ", epoch, " must be >= 0");
  if (!opt_.shard_sizes.empty()) {
    std::vector<int64_t> mine = shard_order(epoch);
    mine.resize(size_t(num_samples_));  // drop_last
    if (draws) draws->assign(mine.size(), epoch);
    return mine;
  }
  std::vector<int64_t> order, mine;
  try {
    order.resize(static_cast<size_t>(dataset_size_));
    mine.reserve(size_t(num_samples_));
    if (draws) draws->reserve(size_t(num_samples_));
  } catch (const std::exception&) {  // bad_alloc, or length_error beyond max_size()
    throw OutOfMemory(detail::cat("sampler: out of host memory for the epoch's order of ", dataset_size_,
                                  " examples (8 bytes each)"),
                      "The dataset is too large to be sampled on this machine.");
  }
  const int64_t reps = opt_.repetitions;
  if (reps > 0 && opt_.shuffle) {
    order = torch_randperm(dataset_size_, opt_.seed + uint64_t(epoch));  // RASampler: g.manual_seed(seed + epoch)
  } else {
    std::iota(order.begin(), order.end(), int64_t(0));
    if (opt_.shuffle) {
      // Fisher-Yates with a generator seeded from (seed, epoch) alone: the same order on
      // every rank, so the shards below are disjoint.
      Generator g(derive_seed(derive_seed(opt_.seed, kShuffleStream), uint64_t(epoch)));
      for (int64_t i = dataset_size_ - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(g.randint(0, i + 1))]);
    }
  }
  // Position p of the padded list is entry p % length of the unpadded one: the padding wraps
  // to the start (several times over when there are fewer examples than ranks). With
  // repetitions the unpadded list holds each order[j] R times in a row: entry q is copy
  // q % R of order[q / R].
  const int64_t length = dataset_size_ * std::max<int64_t>(reps, 1);
  for (int64_t k = 0; k < num_samples_; ++k) {
    const int64_t q = (opt_.rank + k * opt_.world_size) % length;
    mine.push_back(order[size_t(reps > 0 ? q / reps : q)]);
    if (draws) draws->push_back(reps > 0 ? epoch * reps + q % reps : epoch);
  }
  return mine;
}

std::vector<int64_t> Sampler::epoch_indices(int64_t epoch) const { return order_for(epoch, nullptr); }

std::vector<int64_t> Sampler::epoch_draws(int64_t epoch) const {
  std::vector<int64_t> draws;
  order_for(epoch, &draws);
  return draws;
}

}  // namespace rt::data
