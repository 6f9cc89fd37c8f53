#include "engine/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "base/error.h"
#include "engine/memory_report.h"
#include "kernels/cuda/runtime.h"

#if RINGTAPE_CUDA_EMU
#include "cuda_emu/annotate.h"
#endif

namespace rt {
namespace {

// Note [Red zones between blocks]
// The emulated device faults on any access outside the blocks handed out here
// (Note [Block annotations]), so a block's rounding slack catches an overrun; but a request
// of an exact multiple of kRound has none, and the next block of the segment begins where it
// ends: an overrun reads or writes that block unseen, as on a GPU. On the emulated GPU
// (engine/device.cc) every request is rounded with `red_zone` (256) bytes more, never handed
// out: an overrun of up to 256 bytes past any block faults, whatever its size, as past a
// cudaMalloc'd block (Note [Red zones] in cuda_emu/device.cc). The statistics count blocks as
// they are, red zones included: under the emulator, allocated and reserved bytes run up to
// 512 bytes a block above a GPU's.

// Note [Block annotations]
// Under --config=cuda-emu the emulated device checks a kernel's accesses against the blocks
// handed out here, not against whole segments (cuda_emu/annotate.h): a cached block, and
// the rounding slack of one in use, are out of bounds, and a handed-out block is unwritten
// until something writes it; each annotation takes effect in the order of the block's
// stream. Elsewhere device memory is not the host's to check.
void annotate_handed_out([[maybe_unused]] const void* p, [[maybe_unused]] size_t requested,
                         [[maybe_unused]] size_t size, [[maybe_unused]] StreamId stream) {
#if RINGTAPE_CUDA_EMU
  rt_emu_block_handed_out(p, requested, size, stream);
#endif
}
void annotate_cached([[maybe_unused]] const void* p, [[maybe_unused]] size_t size, [[maybe_unused]] StreamId stream) {
#if RINGTAPE_CUDA_EMU
  rt_emu_block_cached(p, size, stream);
#endif
}

}  // namespace

// A piece of a segment: blocks of one segment form a doubly linked list in address order.
struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  StreamId stream = nullptr;
  Pool* pool = nullptr;      // the pool of its segment (not of its size: blocks merge)
  GraphPool* graph = nullptr;  // the graph pool its segment belongs to (Note [Graph pools])
  bool small = false;        // its segment is a small-pool one (Note [Block sizes])
  Block* prev = nullptr;     // neighbours in the segment
  Block* next = nullptr;
  bool allocated = false;
  MemoryTag tag = MemoryTag::other;  // what it was allocated under (Note [Memory tags])
  size_t requested = 0;      // bytes asked for while allocated
  int event_count = 0;       // events of other streams still pending after its free
  std::vector<StreamId> uses;  // other streams it was used on (record_stream)

  bool is_free() const { return !allocated && event_count == 0; }
};

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  std::less<const void*> lt;
  if (a->stream != b->stream) return lt(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return lt(a->ptr, b->ptr);
}

CachingAllocator::CachingAllocator(Device device, std::unique_ptr<RawMemory> raw,
                                   std::function<StreamId()> current_stream, size_t red_zone)
    : device_(device), raw_(std::move(raw)), current_stream_(std::move(current_stream)), red_zone_(red_zone) {}

CachingAllocator::~CachingAllocator() {
  // Only allocators made for a scope (tests) get here; the device allocators live forever.
  std::lock_guard<std::mutex> g(mu_);
  for (const PendingEvent& pe : events_) raw_->destroy_event(pe.event);
  for (auto& [p, first] : segments_) {
    raw_->free(const_cast<void*>(p));
    for (Block* b = first; b;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

size_t CachingAllocator::round_size(size_t bytes) {
  RT_CHECK(bytes <= (size_t(1) << 62), "allocation of ", bytes, " bytes is beyond any device");
  return bytes < kRound ? kRound : (bytes + kRound - 1) / kRound * kRound;
}

void* CachingAllocator::allocate(size_t bytes) {
  return allocate(bytes, current_stream_ ? current_stream_() : nullptr);
}

void* CachingAllocator::allocate(size_t bytes, StreamId stream) {
  const size_t size = round_size(bytes + red_zone_);  // Note [Red zones between blocks]
  std::lock_guard<std::mutex> g(mu_);
  if (captures_.empty()) process_events(false);  // a capture refuses event queries (Note [Graph pools])
  const auto cap = captures_.find(stream);
  GraphPool* gp = cap == captures_.end() ? nullptr : cap->second;
  const bool small = size < kSmallSize;
  Pool& pool = gp ? (small ? gp->small : gp->large) : (small ? small_ : large_);
  Block* b = find_cached(pool, size, stream);
  const bool hit = b != nullptr;
  if (!b) {
    const size_t seg = small ? kSmallSegment : (size + kLargeRound - 1) / kLargeRound * kLargeRound;
    b = new_segment(seg, stream, bytes);
    b->pool = &pool;
    b->graph = gp;
    b->small = small;
  }
  b = split(b, size);
  b->allocated = true;
  b->requested = bytes;
  annotate_handed_out(b->ptr, bytes, b->size, b->stream);
  allocated_[b->ptr] = b;
  b->tag = note_alloc(bytes);
  update_stats([&](AllocatorStats& s) {
    s.allocated_bytes += int64_t(b->size);
    if (hit) s.num_cache_hits++;
  });
  return b->ptr;
}

CachingAllocator::Block* CachingAllocator::find_cached(Pool& pool, size_t size, StreamId stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);  // the smallest block of this stream that fits
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t size, StreamId stream, size_t requested) {
  void* p = raw_->alloc(size);
  if (!p && captures_.empty()) {  // give back what the cache holds and try once more (never in a capture)
    process_events(true);
    release_cached_segments();
    update_stats([](AllocatorStats& s) { s.num_oom_retries++; });
    p = raw_->alloc(size);
  }
  if (!p) fail_oom(requested, size);
  annotate_cached(p, size, stream);
  Block* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = size;
  b->stream = stream;
  segments_[p] = b;
  note_reserved(int64_t(size));
  update_stats([](AllocatorStats& s) {
    s.num_segments++;
    s.num_system_allocs++;
  });
  return b;
}

// Keeps the first `size` bytes of `b` (taken out of its pool) and caches the rest when
// it is big enough to serve a request of the same pool (Note [Block sizes]).
CachingAllocator::Block* CachingAllocator::split(Block* b, size_t size) {
  const size_t rest_size = b->size - size;
  if (rest_size < (b->small ? kRound : kSmallSize)) return b;
  Block* rest = new Block;
  rest->ptr = b->ptr + size;
  rest->size = rest_size;
  rest->stream = b->stream;
  rest->pool = b->pool;
  rest->graph = b->graph;
  rest->small = b->small;
  rest->prev = b;
  rest->next = b->next;
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  rest->pool->insert(rest);  // its neighbours are in use: b, and whatever followed b
  return b;
}

void CachingAllocator::deallocate(void* ptr, size_t /*bytes: the block knows*/) noexcept {
  std::lock_guard<std::mutex> g(mu_);
  auto it = allocated_.find(ptr);
  if (it == allocated_.end()) {
    std::fprintf(stderr, "warning: %s allocator: free of %p, which it did not allocate; ignored\n",
                 device_.str().c_str(), ptr);
    return;
  }
  Block* b = it->second;
  allocated_.erase(it);
  note_free(b->requested, b->tag);
  update_stats([&](AllocatorStats& s) { s.allocated_bytes -= int64_t(b->size); });
  b->allocated = false;
  b->requested = 0;
  b->tag = MemoryTag::other;
  if (!b->uses.empty() && !captures_.empty()) {  // no event may be recorded now (Note [Graph pools])
    b->event_count++;
    deferred_.push_back(b);
    return;
  }
  record_free_events(b);
}

void CachingAllocator::record_free_events(Block* b) noexcept {
  for (StreamId s : b->uses) {
    b->event_count++;  // stays counted if recording fails: the block is then never reused
    try {
      events_.push_back({raw_->record_event(s), s, b});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: %s allocator: cannot record a free event (%s); the block is not reused\n",
                   device_.str().c_str(), e.what());
      continue;
    }
  }
  b->uses.clear();
  if (b->event_count == 0) cache_block(b);
}

void CachingAllocator::cache_block(Block* b) noexcept {
  annotate_cached(b->ptr, b->size, b->stream);
  if (Block* p = b->prev; p && p->is_free()) {
    p->pool->erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (Block* n = b->next; n && n->is_free()) {
    n->pool->erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  b->pool->insert(b);
}

// Releases the freed blocks whose events are done (Note [Pending events]).
void CachingAllocator::process_events(bool wait) noexcept {
  std::vector<StreamId> busy;  // streams with an event not yet done in this pass
  size_t kept = 0;
  for (size_t i = 0; i < events_.size(); ++i) {
    const PendingEvent pe = events_[i];
    bool done = false;
    if (wait || std::find(busy.begin(), busy.end(), pe.stream) == busy.end()) {
      done = true;  // an event that cannot be queried (device error) is not waited for again
      try {
        done = raw_->event_done(pe.event, wait);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "warning: %s allocator: event query failed: %s\n", device_.str().c_str(), ex.what());
      }
      if (!done) busy.push_back(pe.stream);
    }
    if (!done) {
      events_[kept++] = pe;
      continue;
    }
    raw_->destroy_event(pe.event);
    if (--pe.block->event_count == 0) cache_block(pe.block);
  }
  events_.resize(kept);
}

void CachingAllocator::release_cached_segments() noexcept {
  for (Pool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next) {  // part of a segment still in use
        ++it;
        continue;
      }
      it = pool->erase(it);
      segments_.erase(b->ptr);
      raw_->free(b->ptr);
      note_reserved(-int64_t(b->size));
      update_stats([](AllocatorStats& s) { s.num_segments--; });
      delete b;
    }
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> g(mu_);
  if (!captures_.empty()) return;  // it would wait for events and free memory (Note [Graph pools])
  process_events(true);
  release_cached_segments();
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = allocated_.find(ptr);
  RT_CHECK(it != allocated_.end(), "record_stream: ", ptr, " is not the start of a live allocation on ",
           device_.str());
  Block* b = it->second;
  if (stream == b->stream) return;
  for (StreamId s : b->uses)
    if (s == stream) return;
  b->uses.push_back(stream);
}

CachingAllocator::GraphPoolId CachingAllocator::create_graph_pool() {
  std::lock_guard<std::mutex> g(mu_);
  auto gp = std::make_unique<GraphPool>();
  gp->id = next_graph_pool_++;
  const GraphPoolId id = gp->id;
  graph_pools_[id] = std::move(gp);
  return id;
}

void CachingAllocator::begin_capture(StreamId stream, GraphPoolId pool) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = graph_pools_.find(pool);
  RT_CHECK(it != graph_pools_.end(), "begin_capture: graph pool ", pool, " of ", device_.str(), " does not exist");
  RT_CHECK(!captures_.count(stream), "begin_capture: stream ", stream, " of ", device_.str(), " already captures");
  captures_[stream] = it->second.get();
  it->second->captures++;
}

void CachingAllocator::end_capture(StreamId stream) noexcept {
  std::lock_guard<std::mutex> g(mu_);
  auto it = captures_.find(stream);
  if (it == captures_.end()) return;
  it->second->captures--;
  captures_.erase(it);
  if (!captures_.empty()) return;
  // The frees that waited for the captures to end: their events now (Note [Graph pools]).
  std::vector<Block*> deferred;
  deferred.swap(deferred_);
  for (Block* b : deferred) {
    b->event_count--;
    record_free_events(b);
  }
}

void CachingAllocator::release_graph_pool(GraphPoolId pool) noexcept {
  std::lock_guard<std::mutex> g(mu_);
  auto it = graph_pools_.find(pool);
  if (it == graph_pools_.end()) return;
  GraphPool* gp = it->second.get();
  if (gp->captures > 0) {  // a capture still allocates from it: keep it (it leaks)
    std::fprintf(stderr, "warning: %s allocator: graph pool %lu released during its capture; kept\n",
                 device_.str().c_str(), static_cast<unsigned long>(pool));
    return;
  }
  for (auto& [p, first] : segments_) {
    if (first->graph != gp) continue;
    for (Block* b = first; b; b = b->next) {
      Pool* general = b->small ? &small_ : &large_;
      if (b->pool->erase(b)) general->insert(b);  // a cached block: now the general cache's
      b->pool = general;
      b->graph = nullptr;
    }
  }
  graph_pools_.erase(it);
}

void CachingAllocator::record_stream(void* ptr, const Stream& stream) {
  RT_CHECK(stream.device() == device_, "record_stream: a stream of ", stream.device().str(), " for memory of ",
           device_.str());
  record_stream(ptr, stream.handle());
}

std::vector<CachingAllocator::BlockInfo> CachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<BlockInfo> out;
  for (const auto& [p, first] : segments_)
    for (const Block* b = first; b; b = b->next)
      out.push_back({b->ptr, b->size, p, b->stream, b->allocated, !b->allocated && b->event_count > 0,
                     b->graph ? b->graph->id : 0});
  return out;
}

void CachingAllocator::fail_oom(size_t requested, size_t size) {
  OutOfMemoryFacts f;
  f.failure = detail::cat(device_.is_cuda() ? "CUDA out of memory on " : "out of memory on ", device_.str());
  f.requested = requested;
  f.request_detail = detail::cat("a ", size, "-byte segment; the cache was emptied first");
  // What is left cached sits in segments still partly in use: a large block here next to
  // the failure means fragmentation rather than too much live memory.
  for (const Pool* pool : {&small_, &large_})
    for (const Block* b : *pool) f.largest_cached_free = std::max(f.largest_cached_free, int64_t(b->size));
  f.stats = stats();
  f.system = "the device";
  try {
    size_t free_b = 0, total_b = 0;
    raw_->mem_info(&free_b, &total_b);
    f.system_free = int64_t(free_b);
    f.system_total = int64_t(total_b);
  } catch (const std::exception&) {  // unknown: said so in the message
  }
  throw out_of_memory_error(f);
}

// ---- CUDA -----------------------------------------------------------------------------

namespace {

class CudaRawMemory final : public RawMemory {
 public:
  explicit CudaRawMemory(int index) : index_(index) {}
  // Note [Segments during capture]
  // A graph pool may need a segment while its capture is active (Note [Graph pools]).
  // cudaMalloc is one of the calls CUDA leaves to the capture mode (Note [Capture modes] in
  // cuda_emu/capture.cc): the global and thread-local modes refuse it to the capturing thread,
  // and would invalidate the capture. It is not captured and needs no stream order (the
  // memory is new), so the calling thread is switched to relaxed mode for this call alone, as
  // PyTorch's allocator does; outside a capture the switch changes nothing.
  void* alloc(size_t bytes) override {
    const cuda::CaptureMode prev = cuda::exchange_capture_mode(cuda::CaptureMode::relaxed);
    void* p = nullptr;
    try {
      p = cuda::try_malloc(index_, bytes);
    } catch (...) {
      cuda::exchange_capture_mode(prev);
      throw;
    }
    cuda::exchange_capture_mode(prev);
    return p;
  }
  void free(void* ptr) noexcept override { cuda::free(index_, ptr); }
  void mem_info(size_t* free_bytes, size_t* total_bytes) override {
    cuda::mem_get_info(index_, free_bytes, total_bytes);
  }
  void* record_event(StreamId stream) override {
    void* e = cuda::event_create(index_);
    try {
      cuda::event_record(e, stream);
    } catch (...) {
      cuda::event_destroy(e);
      throw;
    }
    return e;
  }
  bool event_done(void* event, bool wait) override {
    if (!wait) return cuda::event_query(event);
    cuda::event_synchronize(event);
    return true;
  }
  void destroy_event(void* event) noexcept override { cuda::event_destroy(event); }

 private:
  int index_;
};

}  // namespace

std::unique_ptr<RawMemory> cuda_raw_memory(int index) { return std::make_unique<CudaRawMemory>(index); }

}  // namespace rt
