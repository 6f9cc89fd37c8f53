// Note [Synchronised batch norm]: in data-parallel training each process normalises its
// own batch, so N processes x batch B do not train like one process x batch N*B: the
// statistics (and their gradients) are those of a smaller batch. With a BatchNormSync the
// batch-norm ops (engine/ops.h) compute them over every process's batch instead:
//   forward   each process's per-channel (count, mean, M2 = sum((x - mean)^2)) are combined
//             into the global ones (Chan's formula); y is normalised with them, and the
//             running variance takes the global unbiased variance M2 / (count - 1);
//   backward  the per-channel sum(dz) and sum(dz * (x - mean)) (global mean) are summed over
//             the processes, and dx uses them with the global count.
// dweight and dbias stay each process's own (the gradient reducer averages them, like every
// parameter's gradient). Each process's loss is the mean over its own batch, so its dz is N
// times the one-process dz of the same examples: its dx and local sums are N times the
// one-process ones, and the reducer's 1/N makes every parameter's gradient the one of batch
// N*B. The combination itself is the implementation's (dist/sync_batch_norm.h); the ops only
// call it, in training mode only, once per forward and once per backward.
#pragma once

#include <cstdint>

namespace rt {

class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  // In: this process's `count` values per channel and, for C channels, their mean[c] and
  // m2[c] = sum((x - mean[c])^2). Out: the same over every process, in place; returns the
  // global count. Every process must get bit-identical results.
  virtual double combine_stats(int64_t C, double count, double* mean, double* m2) = 0;
  // In: this process's per-channel sum_dz[c] and sum_dz_xmu[c] = sum(dz * (x - mean[c])), the
  // mean being the global one. Out: their sums over every process, in place.
  virtual void combine_grad_sums(int64_t C, double* sum_dz, double* sum_dz_xmu) = 0;
};

// Chan's parallel-variance merge of k shards' moments, in shard order (the same result on
// every process that merges the same shards). Shard i is the block blocks[i * (1 + 2C) ...]:
// count, then mean[C], then m2[C]. Writes the merged mean and m2; returns the total count.
// Shards with count 0 are skipped.
double merge_moments(int64_t C, int k, const double* blocks, double* mean, double* m2);

// The sums of k shards' backward sums, in shard order, starting from shard 0's. Shard i is
// the block blocks[i * 2C ...]: sum_dz[C], then sum_dz_xmu[C].
void sum_grad_sums(int64_t C, int k, const double* blocks, double* sum_dz, double* sum_dz_xmu);

}  // namespace rt
