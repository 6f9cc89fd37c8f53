// Streams and events of the emulated device: each stream a queue with a worker thread
// that runs its operations in order, truly asynchronously to the host; events mark a point
// of a stream; vector clocks for the cross-stream hazard check (Note [Cross-stream hazards]
// in internal.h).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "cuda_emu/internal.h"

struct CUstream_st {
  uint32_t uid = 0;
  int device = 0;
  bool legacy = false;    // a device's legacy default stream (handle nullptr)
  bool blocking = false;  // created without cudaStreamNonBlocking: synchronises with legacy
  int priority = 0;

  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::deque<std::unique_ptr<rt::emu::Op>> queue;
  uint64_t enqueued = 0;                // seq of the last queued operation (under g_clock_mu)
  std::atomic<uint64_t> completed{0};   // seq of the last finished one
  rt::emu::Clock clock;                 // under g_clock_mu
  bool stopping = false;
  std::thread worker;
  std::vector<std::string> recent;  // names of the last operations, by seq % size (reports)
};

struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  // The last record (under g_clock_mu): its stream and sequence number, its clock.
  CUstream_st* stream = nullptr;
  uint64_t seq = 0;
  rt::emu::Clock clock;
  uint64_t generation = 0;
  std::atomic<uint64_t> time_ns{0};  // when the stream passed the record
};

namespace rt::emu {

// A live stream for `s` (nullptr and cudaStreamLegacy: the current device's legacy stream;
// cudaStreamPerThread is treated as it), or nullptr when `s` is not a live stream.
CUstream_st* resolve(cudaStream_t s);
// The same, with nullptr and cudaStreamLegacy meaning `device`'s legacy stream.
CUstream_st* resolve_on(cudaStream_t s, int device);
CUstream_st* create_stream(int device, bool blocking, int priority);
cudaError_t destroy_stream(cudaStream_t s);
bool is_live_event(cudaEvent_t e);
CUevent_st* create_event(int device, unsigned flags);
cudaError_t destroy_event(cudaEvent_t e);

// Queues `op` (its kind, name, uses, work filled in) on `s`; fills in the rest. A
// non-success return means nothing was queued.
cudaError_t submit(CUstream_st* s, std::unique_ptr<Op> op);
// Queues `op` and waits for it (copies from or to pageable host memory).
cudaError_t submit_and_wait(CUstream_st* s, std::unique_ptr<Op> op, bool host_learns);

cudaError_t record_event(CUevent_st* e, CUstream_st* s);
cudaError_t wait_event(CUstream_st* s, CUevent_st* e);
// Host waits. They return the device's sticky error, if any.
cudaError_t synchronize_stream(CUstream_st* s);
cudaError_t synchronize_device(int device);
cudaError_t synchronize_event(CUevent_st* e);
bool event_done(CUevent_st* e);   // joins the host clock when done
bool stream_done(CUstream_st* s);

}  // namespace rt::emu
