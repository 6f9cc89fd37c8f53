// Note [Synchronised batch norm]
// In data-parallel training each process normalises its own batch, so N processes x batch B
// do not train like one process x batch N*B: the statistics (and their gradients) are those
// of a smaller batch. With a BatchNormSync the batch-norm ops (engine/ops.h) compute them
// over every process's batch instead:
//   forward   each process's per-channel (count, mean, M2 = sum((x - mean)^2)) are combined
//             into the global ones (Chan's formula); y is normalised with them, and the
//             running variance takes the global unbiased variance M2 / (count - 1);
//   backward  the per-channel sum(dz) and sum(dz * (x - mean)) (global mean) are summed over
//             the processes, and dx uses them with the global count.
// dweight and dbias stay each process's own (the gradient reducer averages them, like every
// parameter's gradient). Each process's loss is the mean over its own batch, so its dz is N
// times the one-process dz of the same examples: its dx and local sums are N times the
// one-process ones, and the reducer's 1/N makes every parameter's gradient the one of batch
// N*B. The collective is the implementation's (distributed/sync_batch_norm.h): the ops hand it a
// small f64 block, get every process's back, and merge them themselves in process order, so
// every process gets the same bits. They call it in training mode only, once per forward and
// once per backward.
//
// On CUDA the blocks never visit the host: the statistics' reduction writes the block on the
// device, the all-gather runs on the communication stream ordered after it, and the merge
// kernel runs on the compute stream ordered after the all-gather (kernels/cuda/batch_norm.h,
// "synchronised batch norm"); the host does not wait.
#pragma once

#include <cstdint>

#include "engine/tensor.h"

namespace rt {

class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  // Every process's `block` (a contiguous f64 tensor of n values, on the op's device), in
  // process (rank) order: a (world, n) f64 tensor on the same device. Every process calls
  // with the same n at the same point of its forward or backward. On the CPU the result is
  // complete at return; on CUDA it is ready for the work queued on the current stream after
  // this call (the host need not wait).
  virtual Tensor all_gather(const Tensor& block) = 0;
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
