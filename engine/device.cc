#include "engine/device.h"

#include <cstdlib>
#include <memory>
#include <vector>

#include "engine/error.h"
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
void Allocator::note_free(size_t bytes) noexcept {
  std::lock_guard<std::mutex> g(mu_);
  stats_.current_bytes -= int64_t(bytes);
  stats_.num_frees++;
}

namespace {

// Host memory, 64-byte aligned (a cache line; AVX-512 loads).
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    RT_CHECK(p, "out of host memory: tried to allocate ", bytes, " bytes (current ", stats().current_bytes,
             " bytes in use by tensors). Use a smaller --batch-size.");
    note_alloc(bytes);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) noexcept override {
    std::free(ptr);
    note_free(bytes);
  }
  Device device() const override { return Device::cpu(); }
};

// Device memory straight from cudaMalloc. The CUDA backend replaces it with a caching,
// stream-aware allocator; the interface and the statistics stay.
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  void* allocate(size_t bytes) override {
    void* p = cuda::malloc(index_, std::max<size_t>(bytes, 1));
    note_alloc(bytes);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) noexcept override {
    cuda::free(index_, ptr);
    note_free(bytes);
  }
  Device device() const override { return Device::cuda(index_); }

 private:
  int index_;
};

}  // namespace

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) {
    static CpuAllocator cpu;
    return cpu;
  }
  const int n = cuda_device_count();
  RT_CHECK(d.index < n, "device ", d.str(), " is not available: ", n, " CUDA device(s) present",
           n == 0 ? " (no GPU or no driver); use --device cpu" : "");
  // Leaked on purpose: tensors freed during static destruction must still find it.
  static std::vector<Allocator*>* per_device = [n] {
    auto* v = new std::vector<Allocator*>();
    for (int i = 0; i < n; ++i) v->push_back(new CudaAllocator(i));
    return v;
  }();
  return *(*per_device)[d.index];
}

}  // namespace rt
