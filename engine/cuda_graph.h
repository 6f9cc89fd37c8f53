// A CUDA graph made by stream capture: the work a function queues on a stream, recorded once
// and launched again as one host call (cudaGraphLaunch) instead of one launch per kernel.
//
//   CudaGraph g;
//   g.capture(stream, [&] { y = model.forward(x); });  // nothing runs yet
//   g.replay(stream);                                  // runs it; again at every replay
//
// Everything the captured work reads or writes is fixed at capture: kernel arguments
// (pointers, sizes, scalars such as a learning rate) are baked into the graph, so inputs
// are copied into the same buffers before each replay, and what the captured code decided
// on the host is decided once. Memory allocated during the capture comes from a private
// pool of the device's caching allocator that the graph owns (Note [Graph pools] in
// engine/caching_allocator.h) and returns when the graph is destroyed; tensors made during
// the capture may be kept and read after each replay. Its capture mode:
// Note [Capture mode of graphs] in engine/cuda_graph.cc.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/stream.h"

namespace rt {

class CachingAllocator;

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();  // destroys the graph and returns its pool; never throws
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Captures the work `fn` queues on `stream` (a CUDA stream made by Stream::create, current
  // during the call) and instantiates it. Throws when the capture fails (the message names
  // the refused call's error); the graph is then empty. Capturing again replaces the graph
  // and keeps its pool: from the same pool state (every block the last capture kept freed)
  // the same allocations get the same addresses.
  void capture(const Stream& stream, const std::function<void()>& fn);
  // Runs `fn` eagerly on `stream` with its allocations from this graph's pool, as a capture
  // would make them: the pool takes the segments a capture of the same work will need.
  void rehearse(const Stream& stream, const std::function<void()>& fn);
  int64_t pool_segments() const;  // segments the pool holds now
  // Runs the captured work on the capture's stream (its pool's blocks are ordered on it).
  void replay(const Stream& stream) const;
  bool captured() const { return exec_ != nullptr; }

 private:
  void reset() noexcept;
  void drop_graph() noexcept;  // the graph and its executable; the pool stays
  CachingAllocator& pool_allocator(const Stream& stream);  // the stream's device's; makes the pool

  Stream stream_;
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  uint64_t pool_ = 0;      // the allocator's graph pool (0: none)
};

}  // namespace rt
