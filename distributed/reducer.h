// Reducer: data-parallel gradient averaging, overlapped with backward (PyTorch DDP's reducer, on the
// project's Communicator).
//
// Note [Gradient buckets]
// Parameters are assigned to flat buckets in reverse registration order (the order backward produces their
// gradients), the first bucket capped at first_bucket_bytes (1 MiB: the gradients of the last layers arrive
// first, and a small bucket starts communication early), the others at bucket_bytes (25 MiB), a parameter
// larger than the cap alone in its bucket; a bucket holds one dtype on one device. Every parameter's gradient
// is a view into its bucket (Note [Gradient buffers] in engine/autograd.h): backward writes gradients in
// place, and a bucket is all-reduced as one tensor, nothing copied in or out.
//
// Note [Bucket launch order]
// A parameter's gradient-ready hook marks it ready; when a bucket's last parameter is ready the bucket is
// launched, together with every later bucket that is also complete, but never before the buckets ahead of it:
// every rank issues the same collectives in the same order whatever order its hooks fired in. On CUDA the
// all-reduce runs on the communicator's stream after an event recorded on the compute stream; on CPU on the
// communicator's thread, so the caller's backward continues meanwhile. The average's 1/N is the collective's
// (ReduceOp::avg).
//
// A step: prepare(communicate) before backward, end_backward() after it, wait_for_gradients() before the
// optimizer step. end_backward() launches what is left (buckets held back by a parameter that got no
// gradient: an error naming the parameters and this rank unless find_unused, which reduces zeros in their
// place); wait_for_gradients() makes the caller's stream wait for the last all-reduce (CPU: waits for it). With gradient accumulation, micro-steps
// before the last call prepare(false): gradients accumulate in the buckets and nothing is communicated.
//
// A step whose stream is being captured as a CUDA graph (Note [Collectives in a CUDA graph] in
// distributed/communicator.h) runs the same way on the host, once: its hooks launch the buckets in the same
// order, and the graph holds the all-reduces on the communication stream, forked from the compute stream at
// each bucket's event and joined back at wait_for_gradients(), so a replay overlaps them with backward as the
// eager step does. It keeps no timeline (its events belong to the capture; the replays run without the host).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/communicator.h"
#include "engine/stream.h"
#include "engine/tensor.h"

namespace rt::dist {

struct ReducerOptions {
  size_t first_bucket_bytes = size_t(1) << 20;
  size_t bucket_bytes = size_t(25) << 20;
  AllReduceAlgo algo = AllReduceAlgo::library;
  bool find_unused = false;  // zeros for parameters without a gradient, instead of an error
  Millis timeout = kDefaultTimeout;
  // Note [Reduce dtype]
  // The dtype the all-reduce carries; nullopt = the gradients' own. Another one (bf16 for f32
  // gradients: half the bytes, like PyTorch's bf16 compress hook) rounds each bucket into a
  // staging tensor on the compute stream before its all-reduce, and widens the result back
  // before the optimizer step (wait_for_gradients): the average carries that dtype's rounding,
  // the optimizer still reads its own dtype.
  std::optional<DType> reduce_dtype;
};

// One step's timeline in seconds from prepare(): what the overlap is computed from.
//
// Note [Two clocks]
// On the CPU the times are the host's: when backward's last op returned, when a bucket was
// handed to the communicator's thread, when that thread finished it. On CUDA the host only
// queues work, so its clock says nothing about what overlapped on the device: there the
// times come from timed events (Note [Device timeline] in distributed/work.h), relative to an event
// recorded on the compute stream at prepare(): the end of backward's kernels, a bucket's
// gradients produced (ready), its all-reduce starting on the communication stream (launched)
// and ending (completed). Those are read once the device has passed them, without waiting
// for it: take_timelines() returns a step's timeline a step or more later on CUDA.
struct StepTimeline {
  const char* clock = "host";  // "host" or "device" (Note [Two clocks])
  double backward_end = 0;     // end of backward (end_backward())
  double wait_end = -1;        // when the averaged gradients were there (wait_for_gradients())
  double since_previous = -1;  // from the previous step's wait_end to this prepare(); -1 on the first step
  struct Bucket {
    double ready = -1;      // when its last gradient was ready (launched can be later: Note [Bucket launch order])
    double launched = -1;   // when its all-reduce was issued (device: started) (-1: not this step)
    double completed = -1;  // when it completed, where the backend reports it (-1: unknown)
  };
  std::vector<Bucket> buckets;
  // The fraction of the all-reduce time hidden behind backward: the time the buckets' all-reduces ran before
  // backward_end over their total time (both as a union of their intervals); -1 when no bucket reported its
  // completion time.
  double overlap() const;
  double comm_seconds() const;  // the union of the intervals' length (-1 as above)
};

class Reducer {
 public:
  using Param = std::pair<std::string,
                          Tensor>;  // name (for messages), leaf requiring grad

  // `params` in registration order (Module::named_parameters). Gives each one a gradient buffer in its bucket
  // and a gradient-ready hook; the communicator must outlive the reducer. Checks with the other ranks that
  // they hold the same parameters (count, names, shapes, dtypes): an rt::Error naming the first that differs
  // (Note [Same model on every rank] in reducer.cc).
  Reducer(Communicator& comm, std::vector<Param> params, ReducerOptions opts = {});
  // Note [Gradients produced elsewhere]
  // Under mixed precision the graph's leaves are 16-bit compute copies while the optimizer
  // consumes the masters' gradients. Then `producers[k]` is the leaf whose gradient-ready
  // hook makes params[k] ready, and `deliver(k)` runs first in that hook, moving
  // producers[k]'s gradient into params[k]'s (its bucket view). The buckets hold what the
  // optimizer consumes, in its dtype, and still launch during backward.
  Reducer(Communicator& comm, std::vector<Param> params, ReducerOptions opts, std::vector<Tensor> producers,
          std::function<void(size_t k)> deliver);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before each backward: communicate = true on the micro-step whose gradients the optimizer will consume
  // (the last of an accumulation), false before the others.
  void prepare(bool communicate);
  // After backward: launches what is left (Note [Gradient buckets]) and records the end of backward in the
  // timeline; then wait_for_gradients() before the optimizer step makes the caller's stream wait for the last
  // all-reduce (CPU: waits for it). finish() is both. No-ops after prepare(false).
  void end_backward();
  void wait_for_gradients();
  void finish() {
    end_backward();
    wait_for_gradients();
  }

  struct BucketInfo {
    DType dtype;  // what its all-reduce carries
    int64_t numel;
    std::vector<std::string> params;  // in the bucket's order (reverse registration)
  };
  std::vector<BucketInfo> buckets() const;
  int64_t collectives() const { return collectives_; }  // all-reduces issued since construction
  // The timelines of communicating steps not yet taken, in step order (Note [Two clocks]): on
  // the CPU the step that wait_for_gradients() ended; on CUDA those the device has finished.
  // wait = true waits for the device to finish them all (the end of training).
  std::vector<StepTimeline> take_timelines(bool wait = false);

 private:
  struct Slot;
  struct Bucket;
  void on_ready(size_t slot);
  void launch_ready();
  void launch(size_t b);
  double now() const;
  bool capturing() const;  // the caller's stream is being captured (CUDA)

  Communicator& comm_;
  ReducerOptions opts_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  bool armed_ = false;    // between prepare(true) and end_backward()
  bool waiting_ = false;  // between end_backward() and wait_for_gradients()
  bool captured_ = false;  // this step is being captured: no timeline
  size_t next_launch_ = 0;  // the first bucket not yet launched this step
  int64_t collectives_ = 0;
  std::chrono::steady_clock::time_point t0_;
  std::optional<std::chrono::steady_clock::time_point> last_end_;  // the previous step's wait end (host)
  StepTimeline timeline_;                                          // this step's, on the host's clock
  std::vector<StepTimeline> finished_;                             // not yet taken
  // A step's events on CUDA, recorded on the compute stream, and its works (Note [Two clocks]).
  struct DeviceStep {
    Event start, backward_end, wait_end;
    std::optional<Event> previous_end;  // the step before's wait_end
    std::vector<Work> works;            // one per bucket
  };
  std::optional<DeviceStep> step_;     // this step's (CUDA)
  std::deque<DeviceStep> on_device_;   // steps the device may not have finished, oldest first
  std::optional<Event> last_device_end_;  // the wait_end of the last step taken off on_device_
  StepTimeline resolve(const DeviceStep& d) const;
  void settle(bool wait);  // moves what the device finished (wait: everything) to finished_
  std::function<void(size_t)> deliver_;  // Note [Gradients produced elsewhere]
  std::shared_ptr<Reducer*> alive_;  // what the gradient hooks see; null once destroyed
};

// Copies rank 0's values of every tensor into the others' (parameters and buffers at the start of training:
// ranks started from different seeds then train identically).
void broadcast_from_rank0(Communicator& comm, const std::vector<Tensor>& tensors, Millis timeout = kDefaultTimeout);

}  // namespace rt::dist
