// SyncBatchNorm: the batch-norm ops' BatchNormSync (Note [Synchronised batch norm] in
// engine/ops/batch_norm_sync.h) over a Communicator, for `ringtape train --sync-bn`.
// Installed in a model with nn::set_batch_norm_sync (train/data_parallel.cc).
//
// Each call is one all_gather of a small f64 block. On CPU processes (Gloo) it is waited for
// at once: the forward and backward of a batch norm block until every rank's values are
// there, as PyTorch's SyncBatchNorm does. On GPUs (NCCL) the host does not wait: the
// all_gather runs on the communication stream after the block's reduction, and the compute
// stream waits for it (Work::block_stream) before the merge kernel. Every rank then merges
// the same gathered values in rank order, so all ranks get bit-identical statistics and sums
// (an all_reduce's order of summation is the backend's).
//
// The trainer gives this class a communicator of its own
// (Note [Sync batch norm on its own communicator], train/data_parallel.cc). Sharing the
// reducer's would work when every rank issues bucket all-reduces and all_gathers in the same
// order (Note [Issue order] in distributed/work.h), but each all_gather would wait behind the
// buckets queued before it, and --find-unused-parameters can change where buckets launch.
#pragma once

#include <cstdint>
#include <vector>

#include "distributed/communicator.h"
#include "engine/ops/batch_norm_sync.h"

namespace rt::dist {

class SyncBatchNorm final : public BatchNormSync {
 public:
  // `comm` must outlive every batch norm that calls this (the model's training forwards
  // and their backwards).
  explicit SyncBatchNorm(Communicator& comm, Millis timeout = kDefaultTimeout) : comm_(comm), timeout_(timeout) {}

  Tensor all_gather(const Tensor& block) override;

  int64_t calls() const { return calls_; }  // collectives issued so far

 private:
  Communicator& comm_;
  Millis timeout_;
  int64_t calls_ = 0;
};

}  // namespace rt::dist
