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

namespace rt::emu {
struct Capture;  // graph.h
}

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
  bool graph_lane = false;          // a graph exec's own (Note [Graph replay] in cuda_emu/graph.cc)
  // Under graph_mu() (graph.h): the capture sequence the stream is part of, and its lane there.
  std::shared_ptr<rt::emu::Capture> capture;
  uint32_t capture_lane = 0;
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
  // Under graph_mu(): when the last record was captured, its capture sequence and the nodes it
  // stands for (Note [Stream capture] in cuda_emu/capture.cc); then `stream` is null.
  std::shared_ptr<rt::emu::Capture> capture;
  std::vector<CUgraphNode_st*> capture_deps;
};

namespace rt::emu {

// A live stream for `s` (nullptr and cudaStreamLegacy: the current device's legacy stream;
// cudaStreamPerThread is treated as it), or nullptr when `s` is not a live stream.
CUstream_st* resolve(cudaStream_t s);
// The same, with nullptr and cudaStreamLegacy meaning `device`'s legacy stream.
CUstream_st* resolve_on(cudaStream_t s, int device);
CUstream_st* create_stream(int device, bool blocking, int priority);
// A graph exec's own non-blocking stream for a lane (Note [Graph replay] in cuda_emu/graph.cc).
CUstream_st* create_lane_stream(int device);
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
bool event_recorded(CUevent_st* e);  // has an uncaptured record to wait for

// ---- graph launches (graph.cc) ---------------------------------------------------------------
// A point of a stream's queue: its operation `seq`, and the clock of what is ordered before it.
struct Point {
  CUstream_st* stream = nullptr;
  uint64_t seq = 0;
  Clock clock;
};
// One operation of a graph launch: its lane (0: the launch's stream) and the earlier steps it
// depends on.
struct ReplayStep {
  uint32_t lane = 0;
  std::unique_ptr<Op> op;
  std::vector<size_t> after;
};
// Queues a graph launch under one hold of the queues' lock (Note [Graph replay] in
// cuda_emu/graph.cc): lane 0 on `s`, lane k on lanes[k]; every lane after `s`'s work so far
// and after *last (the previous launch of the same exec), and `s` after every lane's last
// operation, which becomes *last. Cross-lane dependencies are wait operations with their
// clocks. Each step's op is stamped. A non-success return means nothing was queued.
cudaError_t submit_replay(CUstream_st* s, const std::vector<CUstream_st*>& lanes, std::vector<ReplayStep> steps,
                          Point* last);

}  // namespace rt::emu
