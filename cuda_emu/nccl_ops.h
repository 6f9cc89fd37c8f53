// The operations of the NCCL fake: NCCL's argument checks, the device memory each reads
// and writes, and launch(): the operations of one communicator (one call, or the calls of
// a group) queued as one operation on a stream with rt::emu::enqueue. When the stream's
// worker runs it, the ranks' data moves (nccl_wire.h) and the local part (reductions,
// copies) follows, asynchronously to the host and in stream order, as a kernel would.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "cuda_emu/nccl_comm.h"
#include "cuda_emu/nccl_wire.h"

namespace rt::emu::nccl {

// One call as issued. d.seq is filled in by launch().
struct Op {
  OpDesc d;
  const void* send = nullptr;
  void* recv = nullptr;
  cudaStream_t stream = nullptr;
};

// NCCL's checks of a call on `c`, and the fake's own (the stream's device, buffers of the
// communicator's device, partly overlapping buffers): throws Error naming the problem.
void check_op(const Comm& c, const Op& op);

// Queues `ops` (all of `c`, in issue order) as one operation on the first one's stream;
// the other streams among them are joined to it before and after, as NCCL joins a group's
// streams. Returns ncclUnhandledCudaError when the runtime refused (a sticky fault).
ncclResult_t launch(const std::shared_ptr<Comm>& c, std::vector<Op> ops);

}  // namespace rt::emu::nccl
