// Stream capture (capture.cc) and CUDA graphs (graph.cc) of the emulated device: the capture
// sequences, the captured graphs and their executables, and the rules the rest of the
// emulator asks before it queues, waits or allocates (Note [Stream capture] in
// cuda_emu/capture.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "cuda_emu/stream.h"

// A captured operation: run anew, from a copy of `proto`, at every launch of the graph.
struct CUgraphNode_st {
  std::unique_ptr<rt::emu::Op> proto;
  std::vector<size_t> deps;  // indices of earlier nodes
  size_t index = 0;
  uint32_t lane = 0;        // the captured stream it was queued on (0: the capture's origin)
  bool annotation = false;  // the allocator's stream-ordered marks (annotate.h): not a CUDA node
};

namespace rt::emu {

// What a capture produced; immutable once the capture has ended.
struct GraphBody {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;  // in capture order: each after its deps
  std::vector<int> lane_devices;                       // by lane
};

struct Capture {
  uint64_t id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;  // that began it
  CUstream_st* origin = nullptr;
  bool invalidated = false, ended = false;
  CUgraph_st* graph = nullptr;  // grows while capturing; EndCapture hands it out or deletes it
  std::vector<CUstream_st*> lanes;  // the streams that joined, in order; lane 0 the origin
  std::vector<std::vector<CUgraphNode_st*>> deps;  // by lane: what its next node depends on
  std::vector<std::vector<cudaGraphEdgeData>> edges;  // by lane: deps' edge data (all plain)
};

// Guards the capture state of streams and events, captures, graphs and executables. Taken
// before the queues' lock, never while holding it.
std::mutex& graph_mu();
// Under graph_mu(): the graphs not destroyed (a capture's from its start).
std::unordered_set<CUgraph_st*>& live_graphs();

// ---- what the queueing paths ask (stream.cc) -------------------------------------------------
// Work queued on `s`: while `s` captures, `op` becomes a node of its capture (*taken). An
// error when `s` may not be used now (its capture invalidated; the legacy stream while a
// blocking stream of its device captures).
cudaError_t capture_op(CUstream_st* s, std::unique_ptr<Op>& op, bool* taken);
// cudaEventRecord(e, s): while `s` captures, `e` stands for its stream's dependencies (*taken).
cudaError_t capture_record(CUevent_st* e, CUstream_st* s, bool* taken);
// cudaStreamWaitEvent(s, e): a fork into, or a join within, a capture (*taken); `recorded`:
// `e` has an uncaptured record.
cudaError_t capture_wait(CUstream_st* s, CUevent_st* e, bool recorded, bool* taken);
// A launch on `s` that failed its checks: the capture `s` is part of is invalidated.
void capture_failed(CUstream_st* s);

// ---- what the host calls ask (runtime_api.cc) --------------------------------------------------
// Each returns cudaSuccess when the call may go on, else the code CUDA returns, after
// invalidating the captures it conflicts with (Note [Capture modes] in cuda_emu/capture.cc).
cudaError_t check_unsafe_call();              // allocations, frees and the like
cudaError_t check_host_wait(CUstream_st* s);  // a synchronous operation on, wait on or query of `s`
cudaError_t check_event_wait(CUevent_st* e);  // cudaEventSynchronize / cudaEventQuery
cudaError_t check_event_use(CUevent_st* e);   // a captured event where an uncaptured one is needed
cudaError_t check_device_wait(int device);    // cudaDeviceSynchronize
cudaError_t check_stream_destroy(CUstream_st* s);
// cudaGraphLaunch on `s`: the same refusals as queueing work on it.
cudaError_t check_graph_launch(CUstream_st* s);

}  // namespace rt::emu

struct CUgraph_st {
  std::shared_ptr<rt::emu::GraphBody> body;
  bool capturing = true;  // until its capture ends
};

struct CUgraphExec_st {
  std::shared_ptr<const rt::emu::GraphBody> body;
  std::vector<CUstream_st*> lanes;  // lane k > 0: the exec's own stream; lane 0: the launch's
  rt::emu::Point last;              // the end of the previous launch (under the queues' lock)
};
