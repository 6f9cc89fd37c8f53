#include "engine/device.h"

#include <cstdlib>
#include <map>
#include <unordered_map>
#include <memory>
#include <vector>

#include "engine/caching_allocator.h"
#include "engine/error.h"
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
}
void Allocator::note_alloc(size_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  stats_.current_bytes += int64_t(bytes);
  stats_.num_allocs++;
  if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
}
void Allocator::note_reserved(int64_t delta) noexcept {
  std::lock_guard<std::mutex> g(mu_);
  stats_.reserved_bytes += delta;
}
void Allocator::note_free(size_t bytes) noexcept {
  std::lock_guard<std::mutex> g(mu_);
  stats_.current_bytes -= int64_t(bytes);
  stats_.num_frees++;
}

namespace {

// Host memory, 64-byte aligned (a cache line; AVX-512 loads): pageable from the C library,
// or page-locked from the CUDA driver (pinned_host_allocator()).
//
// Note [Host block cache]: blocks of at least `cache_min` bytes are kept after free and
// handed out again for a request of the same rounded size (up to 1/8 larger). A training
// step asks for the same sizes every time, so after the first step large tensors cost
// neither a system call nor page faults (fresh pages are zeroed by the kernel on first
// touch, which costs as much as writing them). Small pageable blocks go straight to
// malloc, which caches them; pinned blocks are all cached (cudaHostAlloc costs about a
// millisecond per call and synchronises the device).
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
      void* p = b_.alloc((want + 63) / 64 * 64);
      if (!p) fail_oom(bytes);
      note_alloc(bytes);
      note_reserved(int64_t((want + 63) / 64 * 64));
      return p;
    }
    const size_t size = (want + kRound - 1) / kRound * kRound;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = free_.lower_bound(size);
      if (it != free_.end() && it->first <= size + size / 8) {
        void* p = it->second;
        live_[p] = it->first;
        free_.erase(it);
        note_alloc(bytes);
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
    live_[p] = size;
    note_alloc(bytes);
    note_reserved(int64_t(size));
    return p;
  }

  void deallocate(void* ptr, size_t bytes) noexcept override {
    note_free(bytes);
    if (std::max<size_t>(bytes, 1) < b_.cache_min) {
      note_reserved(-int64_t((std::max<size_t>(bytes, 1) + 63) / 64 * 64));
      b_.free(ptr);
      return;
    }
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours: nothing sane to do in a noexcept path
    free_.emplace(it->second, ptr);
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
  [[noreturn]] void fail_oom(size_t bytes) const {
    const AllocatorStats s = stats();
    throw OutOfMemory(detail::cat("out of ", b_.what, ": tried to allocate ", bytes, " bytes (", s.current_bytes,
                                  " bytes in use by tensors, ", s.reserved_bytes, " reserved)"),
                      "Use a smaller --batch-size.");
  }

  Backing b_;
  std::mutex mu_;
  std::multimap<size_t, void*> free_;          // cached blocks by size
  std::unordered_map<void*, size_t> live_;     // cached-size blocks in use -> their size
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
        new HostAllocator({aligned_host_alloc, aligned_host_free, size_t(1) << 20, "host memory", false});
    return *cpu;
  }
  const int n = cuda_device_count();
  RT_CHECK(d.index < n, "device ", d.str(), " is not available: ", n, " CUDA device(s) present",
           n == 0 ? " (no GPU or no driver); use --device cpu" : "");
  // Leaked on purpose: tensors freed during static destruction must still find it.
  static std::vector<Allocator*>* per_device = [n] {
    auto* v = new std::vector<Allocator*>();
    // Blocks belong to the device's current stream at allocation (Note [Streams and blocks]).
    for (int i = 0; i < n; ++i)
      v->push_back(new CachingAllocator(Device::cuda(i), cuda_raw_memory(i),
                                        [i] { return Stream::current(Device::cuda(i)).handle(); }));
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
