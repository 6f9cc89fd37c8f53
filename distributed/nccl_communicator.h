// NcclCommunicator: the Communicator for CUDA tensors, over NCCL (NCCL 2 from the CUDA
// toolkit's directory). One rank per GPU: NCCL refuses two ranks on one device, so more
// than one rank needs a machine with as many GPUs.
//
// Note [Communication stream]
// Every call runs on the communicator's own CUDA stream, stream(). A call first makes that
// stream wait for an event recorded on the caller's current stream (Stream::current), so it
// sees everything the caller queued before it; its completion is an event recorded after
// it, which Work::block_stream(s) makes `s` wait for without blocking the host, and
// Work::wait() waits for on the host. Nothing ever synchronises the whole device. A tensor
// stays alive until its call has completed.
//
// Every call has a timeout: a watchdog thread follows the calls in flight (in issue order,
// they complete in that order on the one stream), and when the oldest runs past its
// timeout, a peer's process dies (distributed/communicator_liveness.h) or NCCL reports an
// asynchronous error, it aborts the NCCL communicator (ncclCommAbort: NCCL's kernels
// return) and fails that call and every later one with a message naming the operation,
// the lost rank when known and the time it ran.
//
// `library` is NCCL's own collective; ring and tree (distributed/allreduce_algos.h) run on
// ncclSend/ncclRecv (one ncclGroupStart/End per step) and our reduce kernel
// (distributed/reduce_kernel_cuda.cc, the kernels of kernels/cuda/elementwise.h), all on the
// communication stream. Reductions: f32, f64, bf16, f16
// (ours widen 16-bit types to float per step and round once per step). On the one stream a
// step's transfers and the previous step's reduction run one after the other: the slices
// pipeline across ranks, but sending and reducing do not overlap within a rank as they do
// on Gloo (NCCL's own kernels fuse them). Runs under --config=cuda-emu (the NCCL fake across
// processes); not yet run on a GPU.
#pragma once

#include <memory>
#include <string>

#include "distributed/communicator.h"
#include "distributed/store.h"
#include "engine/stream.h"

namespace rt::dist {

// "2.27.3 (compiled against 2.27.3)": the NCCL this process loaded (ncclGetVersion) and the
// one its headers were; a mismatch is the first thing to rule out when NCCL misbehaves.
std::string nccl_versions();

class NcclCommunicator final : public Communicator {
 public:
  // `device`: this rank's GPU (usually LOCAL_RANK). Rank 0 creates NCCL's unique id and
  // publishes it in `store` (<prefix>/nccl/id); every rank joins within opts.timeout or
  // throws rt::Error naming what is missing. `store` is used only here.
  NcclCommunicator(Store& store, int rank, int world, int device, CommOptions opts = {});
  // Waits for the calls in flight (each bounded by its timeout), then frees the
  // communicator. Never throws.
  ~NcclCommunicator() override;

  const char* backend() const override { return "nccl"; }
  void check_healthy() override;
  const Stream& stream() const;  // the communication stream
  Work watch(const Stream& stream, const std::string& what, Millis timeout) override;

 protected:
  Work run(Call call) override;
  void check_reducible(DType t, const std::string& what) const override;

 private:
  struct Impl;  // NCCL's and CUDA's types stay out of this header
  std::unique_ptr<Impl> impl_;
};

}  // namespace rt::dist
