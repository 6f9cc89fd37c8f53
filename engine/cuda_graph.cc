#include "engine/cuda_graph.h"

#include <set>

#include "base/error.h"
#include "engine/caching_allocator.h"
#include "kernels/cuda/runtime.h"

namespace rt {

// Note [Capture mode of graphs]
// CUDA's strictest mode, global, refuses the potentially unsafe calls (cudaMalloc, cudaHostAlloc,
// host waits and event queries) to every thread while a global capture is active, and a refused
// call invalidates the capture (Note [Capture modes] in cuda_emu/capture.cc). The capturing
// thread's own allocator is ready for that (Note [Graph pools] in engine/caching_allocator.h),
// but during training other threads make such calls at any time: the loader's workers take
// page-locked batch buffers (cudaHostAlloc through the pinned host allocator) and the
// data-parallel watchdog queries events. In global mode any of them would invalidate the
// step's capture now and then. So captures use thread-local mode: the capturing thread is still
// refused every potentially unsafe call (what would make the captured path synchronise with the
// host fails the capture), other threads are not.
CachingAllocator& CudaGraph::pool_allocator(const Stream& stream) {
  RT_CHECK(stream.device().is_cuda() && stream.handle(),
           "CudaGraph needs a CUDA stream made by Stream::create (not the legacy default stream), got ",
           stream.device().str());
  RT_CHECK(!pool_ || stream.handle() == stream_.handle(),
           "CudaGraph: capture on one stream (its pool's memory is ordered on it)");
  auto* alloc = dynamic_cast<CachingAllocator*>(&allocator_for(stream.device()));
  RT_CHECK(alloc, "CudaGraph: ", stream.device().str(), " has no caching allocator");
  if (!pool_) {
    stream_ = stream;
    pool_ = alloc->create_graph_pool();
  }
  return *alloc;
}

void CudaGraph::capture(const Stream& stream, const std::function<void()>& fn) {
  CachingAllocator& alloc = pool_allocator(stream);
  drop_graph();
  const StreamGuard current(stream);
  alloc.begin_capture(stream.handle(), pool_);
  try {
    cuda::stream_begin_capture(stream.handle(), cuda::CaptureMode::thread_local_);
  } catch (...) {
    alloc.end_capture(stream.handle());
    reset();
    throw;
  }
  try {
    fn();
  } catch (...) {
    // End the capture so that the stream can be used again; its graph is not wanted.
    try {
      void* g = cuda::stream_end_capture(stream.handle());
      if (g) cuda::graph_destroy(g);
    } catch (const std::exception&) {  // an invalidated capture: the first error is the one to report
    }
    alloc.end_capture(stream.handle());
    reset();
    throw;
  }
  try {
    graph_ = cuda::stream_end_capture(stream.handle());
  } catch (...) {
    alloc.end_capture(stream.handle());
    reset();
    throw;
  }
  alloc.end_capture(stream.handle());
  try {
    exec_ = cuda::graph_instantiate(graph_);
  } catch (...) {
    reset();
    throw;
  }
}

void CudaGraph::rehearse(const Stream& stream, const std::function<void()>& fn) {
  CachingAllocator& alloc = pool_allocator(stream);
  const StreamGuard current(stream);
  alloc.begin_capture(stream.handle(), pool_);
  try {
    fn();
  } catch (...) {
    alloc.end_capture(stream.handle());
    throw;
  }
  alloc.end_capture(stream.handle());
}

int64_t CudaGraph::pool_segments() const {
  if (!pool_) return 0;
  auto* alloc = dynamic_cast<CachingAllocator*>(&allocator_for(stream_.device()));
  std::set<const void*> segments;
  for (const auto& b : alloc->snapshot())
    if (b.graph_pool == pool_) segments.insert(b.segment);
  return int64_t(segments.size());
}

void CudaGraph::replay(const Stream& stream) const {
  RT_CHECK(captured(), "CudaGraph::replay: nothing was captured");
  RT_CHECK(stream.handle() == stream_.handle(),
           "CudaGraph::replay: replay on the capture's stream (its memory is ordered on that stream)");
  cuda::graph_launch(exec_, stream.handle());
}

void CudaGraph::drop_graph() noexcept {
  if (exec_) cuda::graph_exec_destroy(exec_);
  if (graph_) cuda::graph_destroy(graph_);
  exec_ = graph_ = nullptr;
}

void CudaGraph::reset() noexcept {
  drop_graph();
  if (pool_) {
    // Its blocks are ordered on the capture's stream; work queued there after this point
    // (a later allocation of them) runs after the launches queued so far.
    try {
      if (auto* alloc = dynamic_cast<CachingAllocator*>(&allocator_for(stream_.device())))
        alloc->release_graph_pool(pool_);
    } catch (const std::exception&) {  // the allocator was made when the pool was: not reached
    }
    pool_ = 0;
  }
}

CudaGraph::~CudaGraph() { reset(); }

}  // namespace rt
