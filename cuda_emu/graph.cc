// CUDA graphs on the emulated device: what a capture made (capture.cc) instantiated and
// launched, and the graph API calls around it.
//
// Note [Graph replay]
// A launch runs every node anew, from a copy of its prototype (a kernel's launch with the
// arguments copied at capture and a fresh launch number; a copy's or memset's pointers; a
// library call's work, or a fresh issue of it: Op::issue), queued as if the work had been
// queued eagerly, so every check applies at each launch as it would have eagerly: a
// kernel's bounds and initialisation checks and a copy's or library call's checks of its
// uses run when it runs (a buffer freed since the capture is a use of freed memory), the
// kernel lab and CUPTI see each node's work, and the cross-stream hazard check sees the
// graph's own parallelism. For that last one the nodes are not put on one stream: each lane
// (a stream of the capture, Note [Stream capture] in cuda_emu/capture.cc) replays on a
// stream of its own, lane 0 on the launch's stream and lane k > 0 on a non-blocking stream
// the exec made for it (create_lane_stream); a node's dependency on a node of another lane
// becomes a wait operation with the clock join an event wait makes. Every lane starts after
// the launch stream's work queued so far, and the launch stream waits for every lane's last
// operation, so the launch as a whole is ordered on its stream like one operation. Two
// branches of a graph that touch the same memory with no dependency between them are then
// a cross-stream hazard at the launch, as the same work queued eagerly would be. Launches
// of one exec are ordered after each other (a launch waits for the previous one's end, on
// whichever stream it was), as CUDA runs an exec's launches one at a time. Within a lane
// the nodes keep their capture order, which every node of a lane depends on anyway (each
// depends on its stream's previous node). The whole launch is queued under one hold of the
// queues' lock (submit_replay in stream.cc), so no other host thread's work lands between
// its parts.
#include <algorithm>

#include "cuda_emu/graph.h"
#include "cuda_emu/perf.h"

using namespace rt::emu;

namespace rt::emu {
namespace {

std::unordered_set<CUgraphExec_st*>& live_execs() {  // under graph_mu()
  static auto* s = new std::unordered_set<CUgraphExec_st*>;
  return *s;
}

cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) set_last_error(e);
  return e;
}

// A node's work for one launch (Note [Graph replay]).
std::unique_ptr<Op> instance(const Op& proto) {
  auto op = std::make_unique<Op>();
  op->kind = proto.kind;
  op->name = proto.name;
  op->uses = proto.uses;
  op->fn = proto.issue ? proto.issue() : proto.fn;
  if (proto.kernel) {
    op->kernel = std::make_unique<KernelLaunch>(*proto.kernel);
    op->kernel->id = new_launch_id();
  }
  op->bytes = proto.bytes;
  op->copy_kind = proto.copy_kind;
  op->library_cost = proto.library_cost;
  op->graph_node = true;
  return op;
}

}  // namespace

std::unordered_set<CUgraph_st*>& live_graphs() {
  static auto* s = new std::unordered_set<CUgraph_st*>;
  return *s;
}

}  // namespace rt::emu

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (!count) return ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> g(graph_mu());
  if (!live_graphs().count(graph)) return ret(cudaErrorInvalidValue);
  std::vector<cudaGraphNode_t> shown;  // the allocator's marks are the emulator's, not CUDA nodes
  for (const auto& n : graph->body->nodes)
    if (!n->annotation) shown.push_back(n.get());
  if (!nodes) {
    *count = shown.size();
    return cudaSuccess;
  }
  const size_t n = std::min(*count, shown.size());
  std::copy_n(shown.begin(), n, nodes);
  std::fill(nodes + n, nodes + *count, nullptr);  // as CUDA: the rest of the array is nulled
  *count = n;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (!exec) return ret(cudaErrorInvalidValue);
  // Auto-free has nothing to free (no allocation nodes are captured) and node priorities are
  // not emulated; upload is cudaGraphInstantiateWithParams' alone, device launch not emulated.
  if (flags & ~(unsigned long long)(cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUseNodePriority))
    return ret(cudaErrorInvalidValue);
  std::shared_ptr<const GraphBody> body;
  {
    std::lock_guard<std::mutex> g(graph_mu());
    if (!live_graphs().count(graph) || graph->capturing) return ret(cudaErrorInvalidValue);
    body = graph->body;
  }
  auto* x = new CUgraphExec_st;
  x->body = body;
  x->lanes.assign(body->lane_devices.size(), nullptr);
  for (const auto& n : body->nodes)
    if (n->lane > 0 && !x->lanes[n->lane]) {
      x->lanes[n->lane] = create_lane_stream(body->lane_devices[n->lane]);
      if (!x->lanes[n->lane]) {
        for (CUstream_st* l : x->lanes)
          if (l) destroy_stream(l);
        delete x;
        return ret(cudaErrorMemoryAllocation);
      }
    }
  {
    std::lock_guard<std::mutex> g(graph_mu());
    live_execs().insert(x);
  }
  *exec = x;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  std::shared_ptr<const GraphBody> body;
  {
    std::lock_guard<std::mutex> g(graph_mu());
    if (!live_execs().count(exec)) return ret(cudaErrorInvalidValue);
    body = exec->body;
  }
  if (const cudaError_t e = sticky_error(s->device)) return e;
  if (const cudaError_t e = check_graph_launch(s)) return ret(e);
  if (s->device != body->lane_devices[0]) return ret(cudaErrorInvalidValue);  // its origin's device
  std::vector<ReplayStep> steps(body->nodes.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const CUgraphNode_st& n = *body->nodes[i];
    steps[i].lane = n.lane;
    steps[i].op = instance(*n.proto);
    steps[i].after = n.deps;
  }
  const bool recorded = perf_recording();  // decided when queued, as each node's is
  if (const cudaError_t e = submit_replay(s, exec->lanes, std::move(steps), &exec->last)) return ret(e);
  if (recorded) perf_graph_launch();
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  {
    std::lock_guard<std::mutex> g(graph_mu());
    if (!live_execs().erase(exec)) return ret(cudaErrorInvalidValue);
  }
  // Launches still queued complete: they own copies of the nodes' work, and a destroyed
  // stream drains its queue first.
  for (CUstream_st* l : exec->lanes)
    if (l) destroy_stream(l);
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  {
    std::lock_guard<std::mutex> g(graph_mu());
    // A capture's graph is its capture's until cudaStreamEndCapture.
    if (!live_graphs().count(graph) || graph->capturing) return ret(cudaErrorInvalidValue);
    live_graphs().erase(graph);
  }
  delete graph;  // outside the lock (its nodes' work may hold anything); its execs keep the nodes
  return cudaSuccess;
}
