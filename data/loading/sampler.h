// Sampler: which examples, in which order, one epoch of one rank sees.
//
// The order is a pure function of (seed, epoch): a run resumed mid-epoch recomputes the
// exact order and skips the batches it already trained on. Without shuffling it is file
// order.
//
// Distributed training (world_size > 1) works like PyTorch's DistributedSampler: the
// epoch's order is padded by repeating its first examples until its length is a multiple
// of world_size, then rank r takes positions r, r + world_size, r + 2 * world_size, ...
// Every rank gets the same number of examples (and so of batches), which collective
// gradient averaging needs; at most world_size - 1 examples appear twice per epoch.
//
// Note [Repeated augmentation]
// With repetitions R >= 1 the sampler is torchvision's RASampler (references/classification/
// sampler.py, the v2 recipe's --ra-sampler --ra-reps): the epoch's permutation is
// torch.randperm(N) of a generator seeded with seed + epoch (torch_randperm below: the same
// numbers as torch 1.13 on the CPU, so the same seed gives the same indices as torchvision),
// each index repeated R times in a row, the list padded from its start to a multiple of
// world_size, rank r taking positions r, r + world_size, ...; then only the first
// floor(floor(N / 256) * 256 / world_size) of them are kept, so an epoch sees about N / R
// distinct images, each R times on different ranks. The copies of one image must be
// augmented differently: copy k of an image in epoch e is drawn as "epoch" e * R + k
// (epoch_draws), the coordinate its random crop, flip and policy draws are keyed by.
//
// Note [Shard order]
// A sharded dataset (webdataset tar shards, data/webdataset.h) is read sequentially, so its
// order is not a permutation of all examples but the order WebDataset's pipelines give, as a
// function of (seed, epoch, rank, world_size) alone (exact resume):
//  1. The epoch's stream: the shards in a permutation drawn from (seed, epoch) (file order
//     without shuffling), each shard's examples in file order; N examples in all.
//  2. Rank r of W reads the contiguous stream range of n_r = floor(N / W) + (r < N % W)
//     examples starting at r * floor(N / W) + min(r, N % W). Ranks count node-major
//     (torchrun's RANK = node * LOCAL_WORLD_SIZE + LOCAL_RANK), so each node reads one
//     contiguous range too: about 1 / nodes of the shards, sharing at most the two shards on
//     its boundaries with its neighbours (each reads its own part of those).
//  3. Uneven counts: a rank with n_r < ceil(N / W) appends the first example of its range
//     (stream position r % N when its range is empty), so every rank has ceil(N / W)
//     examples, as collective averaging needs. Every example is read exactly once per epoch
//     across the world, except those at most W - 1 repeats; the repeats come last in the
//     rank's stream (evaluation counts only the first n_r, as with DistributedSampler).
//  4. With shuffling and shuffle_buffer B > 1 the rank's stream passes through WebDataset's
//     shuffle buffer: the first B examples fill it, then each next one takes the place of a
//     uniformly drawn buffered example, which is emitted; at the end the buffer is emitted
//     in a random order. Draws come from (seed, epoch, rank). Reading stays sequential: the
//     example emitted at position p was read at stream position p + B - 1 at the latest.
//  5. drop_last then cuts the short last batch, as for the other orders.
#pragma once

#include <cstdint>
#include <vector>

namespace rt::data {

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  // Drop each rank's last batch when it is smaller than batch_size (keeps every step's
  // batch size, e.g. for BatchNorm statistics). Otherwise the last batch is short.
  bool drop_last = false;
  int rank = 0;
  int world_size = 1;
  // 0: the DistributedSampler above; R >= 1: RASampler with R repetitions
  // (Note [Repeated augmentation]). Shuffling then follows torch's generator.
  int repetitions = 0;
  // A sharded dataset's example counts per shard, in the dataset's index order (shard 0's
  // examples are indices [0, shard_sizes[0]), ...); non-empty: Note [Shard order]. Their sum
  // must be the dataset's size.
  std::vector<int64_t> shard_sizes;
  int64_t shuffle_buffer = 0;  // B of Note [Shard order]; 0 or 1 = no buffer
};

// torch.randperm(n, generator=g) after g.manual_seed(seed), as torch 1.13 computes it on the
// CPU: a forward Fisher-Yates swap of position i with i + (mt19937() % (n - i)), the
// Mersenne Twister seeded with the low 32 bits of the seed.
std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed);

class Sampler {
 public:
  // Throws rt::Error on a size/batch/rank/world_size that cannot work, and when drop_last
  // would leave no batch at all.
  Sampler(int64_t dataset_size, int64_t batch_size, const SamplerOptions& opt = {});

  // This rank's example indices for `epoch` (>= 0), in order, after padding and drop_last;
  // num_samples() of them.
  std::vector<int64_t> epoch_indices(int64_t epoch) const;
  // Per position of epoch_indices, the "epoch" the example's random choices are drawn for:
  // `epoch` itself, or with repetitions (Note [Repeated augmentation]) epoch * R + the copy
  // number.
  std::vector<int64_t> epoch_draws(int64_t epoch) const;

  int64_t dataset_size() const { return dataset_size_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t num_samples() const { return num_samples_; }  // per rank per epoch
  int64_t num_batches() const { return num_batches_; }  // per rank per epoch
  const SamplerOptions& options() const { return opt_; }

 private:
  int64_t dataset_size_;
  int64_t batch_size_;
  SamplerOptions opt_;
  // The rank's indices and, when `draws` is given, their draw coordinates.
  std::vector<int64_t> order_for(int64_t epoch, std::vector<int64_t>* draws) const;
  std::vector<int64_t> shard_order(int64_t epoch) const;  // Note [Shard order]
  int64_t per_rank_ = 0;  // before drop_last
  int64_t num_samples_ = 0;
  int64_t num_batches_ = 0;
};

}  // namespace rt::data
