// Stream capture on the emulated device: cudaStreamBeginCapture .. cudaStreamEndCapture turn
// the work queued on the capturing streams into a graph (graph.h) instead of running it, and
// the calls CUDA refuses during a capture are refused here with its codes.
//
// Note [Stream capture]
// A capture sequence starts on its origin stream, whose lane is 0. While a stream captures,
// what is queued on it (kernels, copies and memsets, the library fakes' work) becomes a
// node: the queueing path (submit in stream.cc) asks capture_op first, which moves the op
// into the graph as the node's prototype, to be copied at every launch (graph.cc); nothing
// runs and no stream sequence number is taken. The node depends on the stream's current
// dependency set, which then becomes the node alone. cudaEventRecord on a capturing stream
// makes the event stand for that set (and leaves no uncaptured record: CUDA's captured
// events are internal to the capture); cudaStreamWaitEvent on such an event adds its set to
// the waiting stream's, and a stream outside any capture joins the capture that way, as a
// new lane (a fork). cudaStreamEndCapture on the origin ends the sequence for every stream
// that joined; each node must then be an ancestor of the origin's dependency set (every fork
// joined back), else cudaErrorStreamCaptureUnjoined and no graph. An operation CUDA refuses
// during capture invalidates the sequence: later work on its streams fails with
// cudaErrorStreamCaptureInvalidated, and so does cudaStreamEndCapture, which still ends it.
// Refused, with CUDA's codes (each invalidates the capture it conflicts with):
//   - a host wait on or query of a capturing stream (cudaStreamSynchronize, cudaStreamQuery),
//     a pageable-memory cudaMemcpyAsync on one (it would be synchronous), and
//     cudaDeviceSynchronize while a stream of the device captures: cudaErrorStreamCaptureUnsupported;
//   - cudaEventSynchronize, cudaEventQuery, cudaEventElapsedTime on an event recorded in an
//     active capture: cudaErrorCapturedEvent;
//   - the legacy default stream (work, records, waits, host waits, synchronous copies and
//     memsets) while a blocking stream of its device captures: cudaErrorStreamCaptureImplicit
//     (cudaStreamIsCapturing and cudaStreamGetCaptureInfo on it return the code and
//     invalidate nothing, as CUDA documents); the legacy stream waiting for a captured event
//     (it cannot join a capture): cudaErrorStreamCaptureUnsupported;
//   - a capturing stream waiting for an uncaptured record: cudaErrorStreamCaptureIsolation;
//     for a record of another capture: cudaErrorStreamCaptureMerge (both invalidated);
//   - a kernel launch whose configuration fails its checks (the launch's own error);
//   - cudaStreamDestroy of a capturing stream, and cudaGraphLaunch into one (CUDA would add a
//     child graph node, which is not emulated): cudaErrorStreamCaptureUnsupported;
//   - the potentially unsafe calls (Note [Capture modes]).
// An event whose capture has ended is as if never recorded.
//
// Note [Capture modes]
// CUDA leaves some calls ("potentially unsafe": they are not captured, so a replay would
// not repeat them) to the capture mode. The calling thread's mode (cudaThreadExchangeStreamCaptureMode,
// global by default) decides: global forbids them while this thread has a capture not begun
// in relaxed mode, or any other thread has one begun in global mode; thread-local only for
// this thread's own captures; relaxed never. A forbidden call returns
// cudaErrorStreamCaptureUnsupported and invalidates the captures that forbade it. CUDA names
// cudaMalloc as one, and cudaEventQuery from another thread is one (it invalidates a global
// capture); CUDA publishes no full list, and the emulator counts as potentially unsafe, to
// err on the side of refusing: cudaMalloc, cudaFree, cudaHostAlloc/cudaMallocHost,
// cudaFreeHost, the synchronous copies and memsets (cudaMemcpy, cudaMemset, a pageable-memory
// cudaMemcpyAsync), and host waits and queries of uncaptured work (cudaStreamSynchronize,
// cudaStreamQuery, cudaEventSynchronize, cudaEventQuery, cudaDeviceSynchronize).
#include <algorithm>
#include <atomic>

#include "cuda_emu/graph.h"

using namespace rt::emu;

namespace rt::emu {
namespace {

std::vector<std::shared_ptr<Capture>>& active() {  // under graph_mu()
  static auto* v = new std::vector<std::shared_ptr<Capture>>;
  return *v;
}
std::atomic<int> g_active{0};  // active().size(): the queueing paths' fast way out
std::atomic<uint64_t> g_capture_ids{0};
thread_local cudaStreamCaptureMode tls_mode = cudaStreamCaptureModeGlobal;

cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) set_last_error(e);
  return e;
}

bool valid_mode(cudaStreamCaptureMode m) {
  return m == cudaStreamCaptureModeGlobal || m == cudaStreamCaptureModeThreadLocal || m == cudaStreamCaptureModeRelaxed;
}

// Under graph_mu(): whether a blocking stream of `device` captures; those captures are
// invalidated when `invalidate`, as the legacy stream would depend on them
// (Note [Legacy default stream] in cuda_emu/stream.cc).
bool blocking_capture_locked(int device, bool invalidate) {
  bool found = false;
  for (const auto& c : active())
    for (const CUstream_st* l : c->lanes)
      if (l->blocking && l->device == device) {
        found = true;
        if (invalidate) c->invalidated = true;
      }
  return found;
}

// Under graph_mu(): cudaErrorStreamCaptureImplicit when `s` is the legacy stream and a
// blocking stream of its device captures.
cudaError_t implicit_locked(const CUstream_st* s) {
  return s->legacy && blocking_capture_locked(s->device, true) ? cudaErrorStreamCaptureImplicit : cudaSuccess;
}

void add_node(Capture& c, uint32_t lane, std::unique_ptr<Op> op) {
  auto n = std::make_unique<CUgraphNode_st>();
  n->annotation = op->kind == Op::Kind::host;
  n->proto = std::move(op);
  n->lane = lane;
  GraphBody& b = *c.graph->body;
  n->index = b.nodes.size();
  for (const CUgraphNode_st* d : c.deps[lane]) n->deps.push_back(d->index);
  c.deps[lane].assign(1, n.get());
  c.edges[lane].assign(1, cudaGraphEdgeData{});
  b.nodes.push_back(std::move(n));
}

// Under graph_mu(): every node other than the allocator's marks is an ancestor of the
// origin's dependency set (Note [Stream capture]).
bool joined_locked(const Capture& c) {
  const auto& nodes = c.graph->body->nodes;
  std::vector<bool> reached(nodes.size(), false);
  std::vector<size_t> todo;
  for (const CUgraphNode_st* d : c.deps[0]) todo.push_back(d->index);
  while (!todo.empty()) {
    const size_t i = todo.back();
    todo.pop_back();
    if (reached[i]) continue;
    reached[i] = true;
    for (size_t d : nodes[i]->deps) todo.push_back(d);
  }
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!reached[i] && !nodes[i]->annotation) return false;
  return true;
}

// Under graph_mu(): ends `c` for every stream that joined it.
void end_locked(const std::shared_ptr<Capture>& c) {
  for (CUstream_st* l : c->lanes) {
    l->capture.reset();
    l->capture_lane = 0;
  }
  c->ended = true;
  auto& v = active();
  v.erase(std::remove(v.begin(), v.end(), c), v.end());
  g_active.store(int(v.size()), std::memory_order_release);
}

}  // namespace

std::mutex& graph_mu() {
  static auto* m = new std::mutex;
  return *m;
}

// ---- the queueing paths ----------------------------------------------------------------------
cudaError_t capture_op(CUstream_st* s, std::unique_ptr<Op>& op, bool* taken) {
  *taken = false;
  if (g_active.load(std::memory_order_acquire) == 0) return cudaSuccess;
  std::lock_guard<std::mutex> g(graph_mu());
  if (Capture* c = s->capture.get()) {
    if (c->invalidated) return cudaErrorStreamCaptureInvalidated;
    add_node(*c, s->capture_lane, std::move(op));
    *taken = true;
    return cudaSuccess;
  }
  return implicit_locked(s);
}

cudaError_t capture_record(CUevent_st* e, CUstream_st* s, bool* taken) {
  *taken = false;
  std::lock_guard<std::mutex> g(graph_mu());
  if (Capture* c = s->capture.get()) {
    if (c->invalidated) return cudaErrorStreamCaptureInvalidated;
    e->capture = s->capture;
    e->capture_deps = c->deps[s->capture_lane];
    *taken = true;
    return cudaSuccess;
  }
  if (const cudaError_t st = implicit_locked(s)) return st;
  e->capture.reset();
  e->capture_deps.clear();
  return cudaSuccess;
}

cudaError_t capture_wait(CUstream_st* s, CUevent_st* e, bool recorded, bool* taken) {
  *taken = false;
  std::lock_guard<std::mutex> g(graph_mu());
  Capture* ec = e->capture && !e->capture->ended ? e->capture.get() : nullptr;
  Capture* sc = s->capture.get();
  if (ec) {
    if (sc && sc != ec) {
      sc->invalidated = ec->invalidated = true;
      return cudaErrorStreamCaptureMerge;
    }
    if (ec->invalidated) return cudaErrorStreamCaptureInvalidated;
    if (!sc) {
      if (s->legacy) {  // the legacy stream cannot capture
        ec->invalidated = true;
        return cudaErrorStreamCaptureUnsupported;
      }
      s->capture = e->capture;  // a fork: `s` joins as a new lane
      s->capture_lane = uint32_t(ec->lanes.size());
      ec->lanes.push_back(s);
      ec->deps.push_back(e->capture_deps);
      ec->edges.emplace_back(e->capture_deps.size());
      ec->graph->body->lane_devices.push_back(s->device);
    } else {
      auto& d = ec->deps[s->capture_lane];
      for (CUgraphNode_st* n : e->capture_deps)
        if (std::find(d.begin(), d.end(), n) == d.end()) d.push_back(n);
      ec->edges[s->capture_lane].resize(d.size());
    }
    *taken = true;
    return cudaSuccess;
  }
  if (sc) {
    if (sc->invalidated) return cudaErrorStreamCaptureInvalidated;
    if (recorded) {
      sc->invalidated = true;
      return cudaErrorStreamCaptureIsolation;
    }
    *taken = true;  // never recorded: nothing to wait for, as outside a capture
    return cudaSuccess;
  }
  return implicit_locked(s);
}

void capture_failed(CUstream_st* s) {
  if (!s || g_active.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> g(graph_mu());
  if (s->capture) s->capture->invalidated = true;
}

// ---- the host calls (Note [Capture modes]) -------------------------------------------------------
cudaError_t check_unsafe_call() {
  if (g_active.load(std::memory_order_acquire) == 0 || tls_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  const std::thread::id me = std::this_thread::get_id();
  bool forbidden = false;
  std::lock_guard<std::mutex> g(graph_mu());
  for (const auto& c : active()) {
    const bool mine = c->thread == me;
    if ((mine && c->mode != cudaStreamCaptureModeRelaxed) ||
        (!mine && tls_mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal)) {
      c->invalidated = true;
      forbidden = true;
    }
  }
  return forbidden ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t check_host_wait(CUstream_st* s) {
  if (g_active.load(std::memory_order_acquire) == 0) return cudaSuccess;
  {
    std::lock_guard<std::mutex> g(graph_mu());
    if (Capture* c = s->capture.get()) {
      if (c->invalidated) return cudaErrorStreamCaptureInvalidated;
      c->invalidated = true;
      return cudaErrorStreamCaptureUnsupported;
    }
    if (const cudaError_t st = implicit_locked(s)) return st;
  }
  return check_unsafe_call();
}

cudaError_t check_event_use(CUevent_st* e) {
  if (g_active.load(std::memory_order_acquire) == 0) return cudaSuccess;
  std::lock_guard<std::mutex> g(graph_mu());
  Capture* c = e->capture && !e->capture->ended ? e->capture.get() : nullptr;
  if (!c) return cudaSuccess;
  if (c->invalidated) return cudaErrorStreamCaptureInvalidated;
  c->invalidated = true;
  return cudaErrorCapturedEvent;
}

cudaError_t check_event_wait(CUevent_st* e) {
  if (const cudaError_t st = check_event_use(e)) return st;
  return check_unsafe_call();
}

cudaError_t check_device_wait(int device) {
  if (g_active.load(std::memory_order_acquire) == 0) return cudaSuccess;
  {
    std::lock_guard<std::mutex> g(graph_mu());
    bool capturing = false;
    for (const auto& c : active())
      for (const CUstream_st* l : c->lanes)
        if (l->device == device) capturing = c->invalidated = true;
    if (capturing) return cudaErrorStreamCaptureUnsupported;
  }
  return check_unsafe_call();
}

cudaError_t check_stream_destroy(CUstream_st* s) {
  if (g_active.load(std::memory_order_acquire) == 0) return cudaSuccess;
  std::lock_guard<std::mutex> g(graph_mu());
  if (!s->capture) return cudaSuccess;
  s->capture->invalidated = true;
  return cudaErrorStreamCaptureUnsupported;
}

cudaError_t check_graph_launch(CUstream_st* s) {
  if (g_active.load(std::memory_order_acquire) == 0) return cudaSuccess;
  std::lock_guard<std::mutex> g(graph_mu());
  if (Capture* c = s->capture.get()) {
    if (c->invalidated) return cudaErrorStreamCaptureInvalidated;
    c->invalidated = true;  // a child graph node: not emulated
    return cudaErrorStreamCaptureUnsupported;
  }
  return implicit_locked(s);
}

}  // namespace rt::emu

// ---- the CUDA API ------------------------------------------------------------------------------
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (!valid_mode(mode)) return ret(cudaErrorInvalidValue);
  CUstream_st* s = resolve(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (s->legacy) return ret(cudaErrorStreamCaptureUnsupported);  // CUDA: never the legacy stream
  if (const cudaError_t e = sticky_error(s->device)) return e;
  std::lock_guard<std::mutex> g(graph_mu());
  if (s->capture) return ret(cudaErrorIllegalState);
  auto c = std::make_shared<Capture>();
  c->id = ++g_capture_ids;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s;
  c->graph = new CUgraph_st;
  c->graph->body = std::make_shared<GraphBody>();
  c->graph->body->lane_devices.push_back(s->device);
  live_graphs().insert(c->graph);
  c->lanes.push_back(s);
  c->deps.emplace_back();
  c->edges.emplace_back();
  s->capture = c;
  s->capture_lane = 0;
  active().push_back(c);
  g_active.store(int(active().size()), std::memory_order_release);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (!graph) return ret(cudaErrorInvalidValue);
  CUstream_st* s = resolve(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  std::unique_ptr<CUgraph_st> refused;  // deleted after the lock: its nodes' work may hold anything
  std::lock_guard<std::mutex> g(graph_mu());
  const std::shared_ptr<Capture> c = s->capture;
  if (!c) return ret(cudaErrorIllegalState);
  if (c->origin != s) {
    c->invalidated = true;
    return ret(cudaErrorStreamCaptureUnmatched);
  }
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return ret(cudaErrorStreamCaptureWrongThread);
  const cudaError_t st = c->invalidated     ? cudaErrorStreamCaptureInvalidated
                         : !joined_locked(*c) ? cudaErrorStreamCaptureUnjoined
                                              : cudaSuccess;
  end_locked(c);
  CUgraph_st* made = c->graph;
  c->graph = nullptr;
  c->deps.clear();  // its nodes belong to the graph now, which may go first
  c->edges.clear();
  if (st != cudaSuccess) {
    live_graphs().erase(made);
    refused.reset(made);
    *graph = nullptr;
    return ret(st);
  }
  made->capturing = false;
  *graph = made;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (!status) return ret(cudaErrorInvalidValue);
  CUstream_st* s = resolve(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> g(graph_mu());
  if (s->legacy && blocking_capture_locked(s->device, false)) return ret(cudaErrorStreamCaptureImplicit);
  *status = !s->capture                ? cudaStreamCaptureStatusNone
            : s->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                      : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id,
                                     cudaGraph_t* graph, const cudaGraphNode_t** deps,
                                     const cudaGraphEdgeData** edges, size_t* ndeps) {
  if (!status || (edges && !deps)) return ret(cudaErrorInvalidValue);
  CUstream_st* s = resolve(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> g(graph_mu());
  if (s->legacy && blocking_capture_locked(s->device, false)) return ret(cudaErrorStreamCaptureImplicit);
  const Capture* c = s->capture.get();
  *status = !c ? cudaStreamCaptureStatusNone
            : c->invalidated ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
  if (*status != cudaStreamCaptureStatusActive) return cudaSuccess;  // the rest is valid only when active
  const uint32_t lane = s->capture_lane;
  if (id) *id = c->id;
  if (graph) *graph = c->graph;
  if (deps) *deps = c->deps[lane].data();
  if (edges) *edges = c->edges[lane].data();
  if (ndeps) *ndeps = c->deps[lane].size();
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (!mode || !valid_mode(*mode)) return ret(cudaErrorInvalidValue);
  std::swap(*mode, tls_mode);
  return cudaSuccess;
}
