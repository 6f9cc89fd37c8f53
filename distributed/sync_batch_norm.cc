#include "distributed/sync_batch_norm.h"

#include "engine/stream.h"

namespace rt::dist {

Tensor SyncBatchNorm::all_gather(const Tensor& block) {
  RT_CHECK(block.dtype() == DType::f64 && block.ndim() == 1, "SyncBatchNorm: the block must be 1-D f64, got ",
           block.str());
  const int64_t n = block.numel();
  // The communicator's device is the model's (Gloo: CPU, NCCL: the rank's GPU); a block
  // elsewhere is copied there and back.
  const Tensor in = block.to(comm_.device()).contiguous();
  const Tensor out = Tensor::empty({comm_.world_size(), n}, DType::f64, comm_.device());
  ++calls_;
  const Work w = comm_.all_gather(out, in, timeout_);
  if (comm_.device().is_cuda()) {
    // No host wait: work queued on the compute stream from here on runs after the gather. A
    // failure (a lost rank, a timeout) breaks the communicator and surfaces at the
    // reducer's wait for the step's gradients.
    w.block_stream(Stream::current(comm_.device()));
  } else {
    w.wait();
  }
  return out.to(block.device());
}

}  // namespace rt::dist
