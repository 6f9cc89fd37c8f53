// A caching, stream-aware device allocator (the shape of PyTorch's CUDACachingAllocator,
// simplified). Memory comes from the system in segments and is handed out in blocks; a
// freed block is cached and handed out again without a system call. The logic is
// independent of CUDA: the system side is a RawMemory, so tests run it over a fake.
//
// Note [Block sizes]
// A request is rounded up to 512 bytes. Requests under 1 MiB come from the small pool,
// whose segments are 2 MiB; larger ones from the large pool, whose segments are the request
// rounded up to 2 MiB. A cached block larger than a request is split (small pool: when 512
// bytes or more are left; large pool: when 1 MiB or more is left), and a freed block merges
// with free neighbours of its segment. empty_cache() returns only whole free segments to
// the system.
//
// Note [Streams and blocks]
// Every block belongs to the stream it was allocated on (on CUDA, Stream::current(device)
// at allocation time). A freed block goes back to the cache of that stream and is reused
// only by allocations on that stream: work queued later on the same stream runs after the
// work that used the block, so no synchronisation is needed. A block also used on another
// stream must be announced with record_stream(); its free then records an event on each
// such stream, and the block is cached again only when all of them have completed.
//
// Note [Pending events]
// The events of freed blocks are queried, never waited for, at every allocation (before the
// cache is searched), so such a block comes back as soon as its streams have passed the
// free. Events recorded on one stream complete in order: a pass stops querying a stream at
// its first event not yet done. The host waits for them only when the device is out of
// memory and in empty_cache().
//
// Note [Graph pools]
// A CUDA graph replays its kernels on the addresses they had when it was captured, so the
// memory a capture allocates must stay the graph's for as long as the graph lives (PyTorch's
// private pools of CUDACachingAllocator). Between begin_capture(stream, pool) and
// end_capture(stream), every allocation on `stream` comes from the graph's pool: its own
// small and large free sets, whose segments are taken from the system for it. A pool block
// freed during the capture goes back to the pool and is reused by a later allocation of the
// same capture: the replay runs both on the capture's stream in the captured order, so the
// reuse is stream-ordered as it was at capture. Replays go on the capture's stream
// (engine/cuda_graph.h), so a pool block keeps the stream order of every other block.
// Allocations outside the capture never see the pool's blocks, also after the capture ended
// (a block freed later, a graph output the caller dropped, goes back to the pool), until
// release_graph_pool() (the graph is destroyed): the pool's segments then join the general
// cache, where the blocks still in use are freed to and whole free segments go back to the
// system in empty_cache(). While any capture is active the allocator makes none of the calls
// a capture refuses in its mode (Note [Capture modes] in cuda_emu/capture.cc): no event is
// queried or waited for (freed cross-stream blocks wait until the capture ends), no event is
// recorded for a freed block used on other streams (its events are recorded when the last
// capture ends), nothing is returned to the system, and an out-of-memory fails at once
// instead of emptying the cache. A segment the pool needs is still taken during the capture:
// RawMemory::alloc of CUDA switches its thread to relaxed capture mode around cudaMalloc
// (Note [Segments during capture], caching_allocator.cc).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/device.h"
#include "engine/stream.h"

namespace rt {

// A stream as the allocator sees it: cudaStream_t on CUDA (nullptr: the legacy default
// stream), any distinct value for a fake backend.
using StreamId = void*;

// The system side of a device: memory and events.
struct RawMemory {
  virtual ~RawMemory() = default;
  // `bytes` of device memory, or nullptr when the device is out of memory (other
  // failures throw rt::Error).
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* ptr) noexcept = 0;
  virtual void mem_info(size_t* free_bytes, size_t* total_bytes) = 0;
  // An event recorded on `stream` after the work queued on it so far.
  virtual void* record_event(StreamId stream) = 0;
  // Whether the event has completed. Without `wait` it never blocks (on CUDA,
  // cudaEventQuery); with `wait`, waits for it first (and returns true).
  virtual bool event_done(void* event, bool wait) = 0;
  virtual void destroy_event(void* event) noexcept = 0;
};

// CUDA device memory and events of device `index` (cudaMalloc, cudaEvent_t).
std::unique_ptr<RawMemory> cuda_raw_memory(int index);

class CachingAllocator final : public Allocator {
 public:
  static constexpr size_t kRound = 512;                   // block granularity
  static constexpr size_t kSmallSize = size_t(1) << 20;   // requests below go to the small pool
  static constexpr size_t kSmallSegment = size_t(2) << 20;
  static constexpr size_t kLargeRound = size_t(2) << 20;  // large segments are multiples of this

  // `current_stream` names the stream an allocate(bytes) belongs to (on CUDA, the
  // device's current stream in the calling thread). `red_zone`: bytes past every request
  // that the block keeps unused (Note [Red zones between blocks]); 0 but on the emulated GPU.
  CachingAllocator(Device device, std::unique_ptr<RawMemory> raw, std::function<StreamId()> current_stream,
                   size_t red_zone = 0);
  ~CachingAllocator() override;

  // On the current stream, charged to the thread's current MemoryTag. Throws
  // rt::OutOfMemory (Note [Out-of-memory messages]) when even an emptied cache leaves too
  // little memory.
  void* allocate(size_t bytes) override;
  void* allocate(size_t bytes, StreamId stream);
  void deallocate(void* ptr, size_t bytes) noexcept override;
  Device device() const override { return device_; }

  // `ptr` (an allocated block) is used by work on `stream` too: when it is freed, it is
  // reused only after the work queued on `stream` until then has completed.
  void record_stream(void* ptr, StreamId stream);
  void record_stream(void* ptr, const Stream& stream);  // a stream of this device
  // Waits for the events of freed cross-stream blocks, then returns every whole free
  // segment to the system.
  void empty_cache() override;

  // CUDA graphs' private pools (Note [Graph pools]). A new, empty pool.
  using GraphPoolId = uint64_t;
  GraphPoolId create_graph_pool();
  // From now until end_capture(stream), allocations on `stream` come from `pool` (one capture
  // per stream at a time).
  void begin_capture(StreamId stream, GraphPoolId pool);
  void end_capture(StreamId stream) noexcept;
  // The graph that owned `pool` is gone: its segments join the general cache.
  void release_graph_pool(GraphPoolId pool) noexcept;

  // For tests and memory reports: every block of every segment, in address order.
  struct BlockInfo {
    const void* ptr;
    size_t size;
    const void* segment;  // start of its segment
    StreamId stream;
    bool allocated;
    bool awaiting_events;  // freed, waiting for events of other streams
    GraphPoolId graph_pool;  // 0: the general cache
  };
  std::vector<BlockInfo> snapshot() const;

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySize>;
  struct GraphPool {
    GraphPoolId id = 0;
    Pool small, large;
    int captures = 0;  // streams capturing into it now
  };

  static size_t round_size(size_t bytes);
  Block* find_cached(Pool& pool, size_t size, StreamId stream);
  Block* new_segment(size_t size, StreamId stream, size_t requested);
  Block* split(Block* b, size_t size);
  void cache_block(Block* b) noexcept;  // merges with free neighbours and caches it
  void record_free_events(Block* b) noexcept;  // or caches it when it has no other streams' uses
  void process_events(bool wait) noexcept;
  void release_cached_segments() noexcept;
  [[noreturn]] void fail_oom(size_t requested, size_t size);

  const Device device_;
  const std::unique_ptr<RawMemory> raw_;
  const std::function<StreamId()> current_stream_;
  const size_t red_zone_;

  mutable std::mutex mu_;
  Pool small_, large_;                            // cached free blocks
  std::unordered_map<void*, Block*> allocated_;   // blocks handed out, by address
  struct PendingEvent {
    void* event;
    StreamId stream;  // where it was recorded
    Block* block;     // the freed block that waits for it
  };
  std::vector<PendingEvent> events_;  // in recording order (Note [Pending events])
  std::map<const void*, Block*> segments_;        // first block of each segment, by address
  std::map<GraphPoolId, std::unique_ptr<GraphPool>> graph_pools_;  // live ones (Note [Graph pools])
  GraphPoolId next_graph_pool_ = 1;
  std::unordered_map<StreamId, GraphPool*> captures_;  // streams capturing now, into which pool
  std::vector<Block*> deferred_;  // freed during a capture with other streams' uses
};

}  // namespace rt
