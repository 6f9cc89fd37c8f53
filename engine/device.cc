#include "engine/device.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <unordered_map>
#include <memory>
#include <vector>

#include "engine/caching_allocator.h"
#include "base/error.h"
#include "engine/memory_report.h"
#include "engine/stream.h"
#include "kernels/cuda/runtime.h"

namespace rt {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    const std::string idx = s.substr(5);
    char* end = nullptr;
    const long i = std::strtol(idx.c_str(), &end, 10);
    if (!idx.empty() && *end == '\0' && i >= 0 && i < 1024) return cuda(int(i));
  }
  RT_FAIL("unknown device '", s, "': expected cpu, cuda or cuda:N (N a device index)");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

int cuda_device_count() {
  static const int n = cuda::device_count();
  return n;
}

Device default_device() { return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu(); }

AllocatorStats Allocator::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return stats_;
}
void Allocator::reset_peak() {
  std::lock_guard<std::mutex> g(mu_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
  stats_.tag_peak = stats_.tag_bytes;
  stats_.tag_at_peak = stats_.tag_bytes;
}
MemoryTag Allocator::note_alloc(size_t bytes) {
  const MemoryTag tag = current_memory_tag();
  // A MemoryTag cast from a bad integer is charged to `other` rather than index past the arrays.
  const size_t t = size_t(tag) < kNumMemoryTags ? size_t(tag) : size_t(MemoryTag::other);
  std::lock_guard<std::mutex> g(mu_);
  stats_.current_bytes += int64_t(bytes);
  stats_.num_allocs++;
  stats_.tag_bytes[t] += int64_t(bytes);
  if (stats_.tag_bytes[t] > stats_.tag_peak[t]) stats_.tag_peak[t] = stats_.tag_bytes[t];
  if (stats_.current_bytes > stats_.peak_bytes) {
    stats_.peak_bytes = stats_.current_bytes;
    stats_.tag_at_peak = stats_.tag_bytes;  // a few words, copied only while memory grows past its peak
  }
  return MemoryTag(t);
}
void Allocator::note_reserved(int64_t delta) noexcept {
  std::lock_guard<std::mutex> g(mu_);
  stats_.reserved_bytes += delta;
  if (stats_.reserved_bytes > stats_.peak_reserved_bytes) stats_.peak_reserved_bytes = stats_.reserved_bytes;
}
void Allocator::note_free(size_t bytes, MemoryTag tag) noexcept {
  // An out-of-range tag (a corrupted block record) must not index past the arrays.
  const size_t t = size_t(tag) < kNumMemoryTags ? size_t(tag) : size_t(MemoryTag::other);
  std::lock_guard<std::mutex> g(mu_);
  stats_.current_bytes -= int64_t(bytes);
  stats_.num_frees++;
  stats_.tag_bytes[t] -= int64_t(bytes);
}

namespace {

// The machine's available and total memory (/proc/meminfo's MemAvailable and MemTotal);
// false where there is no such file.
bool host_memory_info(int64_t* available, int64_t* total) {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return false;
  long long avail_kib = -1, total_kib = -1, kib = 0;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "MemTotal: %lld kB", &kib) == 1) total_kib = kib;
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) avail_kib = kib;
  }
  std::fclose(f);
  if (avail_kib < 0 || total_kib < 0) return false;
  *available = int64_t(avail_kib) * 1024;
  *total = int64_t(total_kib) * 1024;
  return true;
}

// Host memory, 64-byte aligned (a cache line; AVX-512 loads): pageable from the C library,
// or page-locked from the CUDA driver (pinned_host_allocator()).
//
// Note [Host block cache]
// Blocks of at least `cache_min` bytes are kept after free and handed out again for a request
// of the same rounded size (up to 1/8 larger). A training step asks for the same sizes every
// time, so after the first step large tensors cost neither a system call nor page faults
// (fresh pages are zeroed by the kernel on first touch, which costs as much as writing them).
// Pageable blocks under 64 KiB go straight to malloc, which caches them. (Not larger ones:
// glibc maps blocks over its mmap threshold afresh and trims its heap top once 128 KiB or more
// lie free there, so the 0.1-1 MiB activations of a small model were page-faulted again every
// step. With a 1 MiB limit the default Fashion-MNIST model's step took 40-90 ms, erratically;
// with 64 KiB, 24.5 ms.) Pinned blocks are all cached (cudaHostAlloc costs about a millisecond
// per call and synchronises the device).
//
// Note [Tag of a small host block]
// A block under `cache_min` goes straight to the C library and has no record here, yet its
// free must know the tag it was allocated under (Note [Memory tags]). The tag is kept in
// the byte just after the requested bytes, inside the block: deallocate() gets the size
// allocate() got, so it finds the byte without a lookup. That byte is free in the 64-byte
// rounding unless the size is a multiple of 64, which costs one cache line more; a map from
// address to tag would cost a hash insert, an erase and a node allocation per block, under
// a lock.
class HostAllocator final : public Allocator {
 public:
  struct Backing {
    void* (*alloc)(size_t bytes);  // nullptr when out of memory
    void (*free)(void* p) noexcept;
    size_t cache_min;
    const char* what;              // for error messages
    bool pinned;
  };
  static constexpr size_t kRound = size_t(64) << 10;

  explicit HostAllocator(Backing b) : b_(b) {}

  void* allocate(size_t bytes) override {
    const size_t want = std::max<size_t>(bytes, 1);
    if (want < b_.cache_min) {
      const size_t block = small_block_size(want);
      void* p = b_.alloc(block);
      if (!p) fail_oom(bytes);
      note_reserved(int64_t(block));
      static_cast<uint8_t*>(p)[want] = uint8_t(note_alloc(bytes));  // Note [Tag of a small host block]
      return p;
    }
    const size_t size = (want + kRound - 1) / kRound * kRound;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = free_.lower_bound(size);
      if (it != free_.end() && it->first <= size + size / 8) {
        void* p = it->second;
        LiveBlock& rec = live_[p];
        rec = {it->first, note_alloc(bytes)};
        free_.erase(it);
        return p;
      }
    }
    void* p = b_.alloc(size);
    if (!p) {  // give the cache back and try once more
      empty_cache();
      p = b_.alloc(size);
    }
    if (!p) fail_oom(bytes);
    std::lock_guard<std::mutex> g(mu_);
    LiveBlock& rec = live_[p];
    note_reserved(int64_t(size));
    rec = {size, note_alloc(bytes)};
    return p;
  }

  void deallocate(void* ptr, size_t bytes) noexcept override {
    const size_t want = std::max<size_t>(bytes, 1);
    if (want < b_.cache_min) {
      note_free(bytes, MemoryTag(static_cast<const uint8_t*>(ptr)[want]));  // Note [Tag of a small host block]
      note_reserved(-int64_t(small_block_size(want)));
      b_.free(ptr);
      return;
    }
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours: nothing sane to do in a noexcept path
    note_free(bytes, it->second.tag);
    free_.emplace(it->second.size, ptr);
    live_.erase(it);
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [size, p] : free_) {
      b_.free(p);
      note_reserved(-int64_t(size));
    }
    free_.clear();
  }

  Device device() const override { return Device::cpu(); }
  bool pinned() const override { return b_.pinned; }

 private:
  struct LiveBlock {
    size_t size;     // cached size (the request rounded to kRound)
    MemoryTag tag;   // what it was allocated under (Note [Memory tags])
  };

  // The requested bytes, the tag byte, rounded to 64 (aligned_alloc wants a multiple).
  static size_t small_block_size(size_t want) { return (want + 1 + 63) / 64 * 64; }

  [[noreturn]] void fail_oom(size_t bytes) {
    OutOfMemoryFacts f;
    f.failure = detail::cat("out of ", b_.what);
    f.requested = bytes;
    {
      std::lock_guard<std::mutex> g(mu_);
      f.largest_cached_free = free_.empty() ? 0 : int64_t(free_.rbegin()->first);
    }
    f.stats = stats();
    f.system = "the machine";
    host_memory_info(&f.system_free, &f.system_total);
    throw out_of_memory_error(f);
  }

  Backing b_;
  std::mutex mu_;
  std::multimap<size_t, void*> free_;           // cached blocks by size
  std::unordered_map<void*, LiveBlock> live_;   // cached-size blocks in use
};

void* aligned_host_alloc(size_t bytes) { return std::aligned_alloc(64, bytes); }
void aligned_host_free(void* p) noexcept { std::free(p); }
void* pinned_alloc(size_t bytes) { return cuda::host_alloc_pinned(bytes); }
void pinned_free(void* p) noexcept { cuda::host_free_pinned(p); }

}  // namespace

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) {
    // Leaked on purpose, like the others: a static tensor freed during static destruction
    // must still find it, and its cached blocks stay reachable (LeakSanitizer: not leaks).
    static HostAllocator* cpu =
        new HostAllocator({aligned_host_alloc, aligned_host_free, HostAllocator::kRound, "host memory", false});
    return *cpu;
  }
  const int n = cuda_device_count();
  RT_CHECK(d.index < n, "device ", d.str(), " is not available: ", n, " CUDA device(s) present",
           n == 0 ? " (no GPU or no driver); use the CPU" : "");
  // Leaked on purpose: tensors freed during static destruction must still find it.
  static std::vector<Allocator*>* per_device = [n] {
    auto* v = new std::vector<Allocator*>();
    // Blocks belong to the device's current stream at allocation (Note [Streams and blocks]).
    // On the emulated GPU every block is followed by a red zone
    // (Note [Red zones between blocks] in engine/caching_allocator.cc).
#if RINGTAPE_CUDA_EMU
    constexpr size_t kRedZone = 256;
#else
    constexpr size_t kRedZone = 0;
#endif
    for (int i = 0; i < n; ++i)
      v->push_back(new CachingAllocator(Device::cuda(i), cuda_raw_memory(i),
                                        [i] { return Stream::current(Device::cuda(i)).handle(); }, kRedZone));
    return v;
  }();
  return *(*per_device)[d.index];
}

Allocator& pinned_host_allocator() {
  const int n = cuda_device_count();
  RT_CHECK(n > 0, "pinned host memory needs a CUDA device and driver; none is present (load batches into ",
           "ordinary memory: pin_memory off)");
  // Leaked on purpose, like the device allocators: blocks may be freed during static destruction.
  static HostAllocator* pinned = new HostAllocator({pinned_alloc, pinned_free, 0, "pinned host memory", true});
  return *pinned;
}

}  // namespace rt
