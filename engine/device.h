// Devices and their allocators. Every device has an allocator with statistics from the
// start (current and peak bytes, in total and by MemoryTag), so memory is measured the same
// way on CPU and GPU. engine/memory_report.h turns them into log lines and JSON.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "engine/memory_tag.h"

namespace rt {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  // "cpu", "cuda", "cuda:1". Throws rt::Error naming the accepted forms otherwise.
  static Device parse(const std::string& s);

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

// Number of usable CUDA devices; 0 (never an error) when there is no GPU or driver.
int cuda_device_count();
// The best device present: cuda:0 when a GPU is usable, else cpu.
Device default_device();

// Bytes per MemoryTag, indexed by size_t(tag).
using TagBytes = std::array<int64_t, kNumMemoryTags>;

struct AllocatorStats {
  int64_t current_bytes = 0;   // bytes handed out and not yet returned
  int64_t peak_bytes = 0;      // maximum of current_bytes since the last reset_peak()
  int64_t num_allocs = 0;      // allocate() calls
  int64_t num_frees = 0;       // deallocate() calls
  int64_t reserved_bytes = 0;  // held from the system: in use plus cached for reuse
  int64_t peak_reserved_bytes = 0;  // maximum of reserved_bytes since the last reset_peak()
  // By the tag each allocation was made under (Note [Memory tags]), in requested bytes
  // like current_bytes.
  TagBytes tag_bytes{};    // now; sums to current_bytes
  TagBytes tag_peak{};     // each tag's own maximum since reset_peak() (reached at different times)
  TagBytes tag_at_peak{};  // tag_bytes when current_bytes first reached peak_bytes; sums to peak_bytes
  // Caching allocators only (engine/caching_allocator.h); zero elsewhere.
  int64_t allocated_bytes = 0;   // bytes of the blocks handed out (requests rounded up)
  int64_t num_cache_hits = 0;    // allocations served from cached blocks
  int64_t num_segments = 0;      // segments held from the system now
  int64_t num_system_allocs = 0; // segments requested from the system (cudaMalloc calls)
  int64_t num_oom_retries = 0;   // times the cache was emptied to retry a failed request
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` (64-byte aligned at least), charged to the calling thread's
  // current_memory_tag(), or throws rt::OutOfMemory saying how much was asked for, what
  // holds memory and what to do about it (Note [Out-of-memory messages]).
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) noexcept = 0;
  virtual Device device() const = 0;
  virtual bool pinned() const { return false; }  // page-locked host memory

  AllocatorStats stats() const;
  // Peaks (bytes, reserved, per tag, tag_at_peak) start again from the current values.
  void reset_peak();
  // Returns cached, unused blocks to the system (a no-op for allocators without a cache).
  virtual void empty_cache() {}

 protected:
  // Counts an allocation of `bytes` under the calling thread's current tag and returns that
  // tag: the allocator keeps it with the block and gives it back to note_free.
  MemoryTag note_alloc(size_t bytes);
  void note_free(size_t bytes, MemoryTag tag) noexcept;
  void note_reserved(int64_t delta) noexcept;
  // Any other change to the statistics, made under their lock: update_stats([](auto& s) {...}).
  template <typename F>
  void update_stats(F&& f) noexcept {
    std::lock_guard<std::mutex> g(mu_);
    f(stats_);
  }

 private:
  mutable std::mutex mu_;
  AllocatorStats stats_;
};

// The process-wide allocator of a device (created on first use).
Allocator& allocator_for(Device d);
// Page-locked host memory (device cpu) for asynchronous copies to a GPU: loader batches
// are built in it. Throws rt::Error when no CUDA device is present.
Allocator& pinned_host_allocator();

}  // namespace rt
