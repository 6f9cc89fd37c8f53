// Emulated devices and their memory (Note [One reservation] in internal.h): the number of
// devices and their memory limit from the environment, cudaMalloc's heap per device, the
// shadow states, pinned host memory, and the allocator annotations (annotate.h).
//
//   RINGTAPE_EMU_DEVICES  devices (1-64, default 1)
//   RINGTAPE_EMU_MEMORY   memory per device: bytes, or a number with K, M or G (default 8G)
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "cuda_emu/annotate.h"
#include "cuda_emu/internal.h"
#include "cuda_emu/stream.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define RT_EMU_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define RT_EMU_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define RT_EMU_POISON(p, n) ((void)(p), (void)(n))
#define RT_EMU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace rt::emu {
namespace {

constexpr size_t kAlign = 256;  // cudaMalloc's alignment
// Note [Red zones]
// A GPU faults on an access past a block only where no other block lies; here every access
// outside a block faults (the shadow says kNoAccess), but a request of an exact multiple of
// kAlign left no slack, and the next block began where it ended: an overrun read or wrote that
// block, unseen. So every block is followed by kRedZone bytes that are never handed out (nor
// counted as used): an overrun of up to kRedZone bytes past any block faults, whatever its size.
constexpr size_t kRedZone = 256;
constexpr size_t kGiB = size_t(1) << 30;

[[noreturn]] void bad_env(const char* name, const char* value, const char* want) {
  std::fprintf(stderr, "cuda-emu: %s='%s' is not %s; unset it or set it to a valid value\n", name, value, want);
  std::fflush(stderr);
  std::_Exit(2);
}

int env_devices() {
  const char* v = std::getenv("RINGTAPE_EMU_DEVICES");
  if (!v || !*v) return 1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end || n < 1 || n > 64) bad_env("RINGTAPE_EMU_DEVICES", v, "a device count from 1 to 64 (e.g. 2)");
  return int(n);
}

// CUDA_VISIBLE_DEVICES as CUDA reads it, over the emulated machine's `machine` devices: the
// ones this process sees, in that order (a scheduler binding each task to its own GPU gives
// each process a different one, seen as cuda:0). Unset: all of them.
int env_visible(int machine, int* physical) {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!v) {
    for (int d = 0; d < machine; ++d) physical[d] = d;
    return machine;
  }
  int n = 0;
  uint64_t seen = 0;
  for (const char* p = v;;) {
    char* end = nullptr;
    const long d = std::strtol(p, &end, 10);
    if (end == p || d < 0 || d >= machine || (seen >> d & 1) || (*end && *end != ','))
      bad_env("CUDA_VISIBLE_DEVICES", v,
              ("a list of distinct device numbers below RINGTAPE_EMU_DEVICES=" + std::to_string(machine) +
               " (e.g. 1 or 0,2; the emulator takes no UUIDs, and needs at least one device)")
                  .c_str());
    seen |= uint64_t(1) << d;
    physical[n++] = int(d);
    if (!*end) return n;
    p = end + 1;
  }
}

size_t env_memory() {
  const char* v = std::getenv("RINGTAPE_EMU_MEMORY");
  if (!v || !*v) return 8 * kGiB;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  size_t unit = 1;
  if (*end == 'K' || *end == 'k') unit = size_t(1) << 10, ++end;
  else if (*end == 'M' || *end == 'm') unit = size_t(1) << 20, ++end;
  else if (*end == 'G' || *end == 'g') unit = kGiB, ++end;
  const size_t bytes = size_t(n) * unit;
  if (*end || n == 0 || bytes < (size_t(1) << 20) || bytes > 1024 * kGiB)
    bad_env("RINGTAPE_EMU_MEMORY", v, "a memory size per device from 1M to 1024G (e.g. 4G)");
  return bytes;
}

void* reserve(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "cuda-emu: cannot reserve %zu GiB of address space for emulated device memory: %s; "
                 "lower RINGTAPE_EMU_MEMORY or RINGTAPE_EMU_DEVICES\n", bytes >> 30, std::strerror(errno));
    std::_Exit(2);
  }
  return p;
}

Heap make_heap() {
  Heap h;
  h.ndev = env_visible(env_devices(), h.physical);
  h.limit = env_memory();
  h.span = kGiB;
  h.span_shift = 30;
  while (h.span < h.limit) h.span <<= 1, ++h.span_shift;
  const size_t total = h.span * size_t(h.ndev);
  h.total = total;
  h.base = reinterpret_cast<uintptr_t>(reserve(total));
  h.shadow = static_cast<uint8_t*>(reserve(total));
  const size_t cells = total >> kGranuleShift;
  h.writer = static_cast<std::atomic<uint64_t>*>(reserve(cells * sizeof(uint64_t)));
  h.reader = static_cast<std::atomic<uint64_t>*>(reserve(cells * kReaders * sizeof(uint64_t)));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // Not under a sanitizer's variant: its runtime receives the kernels' accesses
  // (Note [Instrumented kernels] in memcheck.cc). 32 bytes per word, touched where kernels go.
  h.race = static_cast<RaceCell*>(reserve((total >> 2) * sizeof(RaceCell)));
#endif
  return h;
}

// cudaMalloc's heap of one device: first fit over free ranges by address.
struct DeviceHeap {
  std::mutex mu;
  std::map<size_t, size_t> free_ranges;  // offset -> length
  std::map<size_t, size_t> allocated;    // offset -> length (rounded)
  size_t used = 0;
};

DeviceHeap* device_heaps() {
  static DeviceHeap* heaps = [] {
    auto* hs = new DeviceHeap[size_t(heap().ndev)];  // leaked: device memory outlives static destructors
    for (int d = 0; d < heap().ndev; ++d) hs[d].free_ranges[0] = heap().span;
    return hs;
  }();
  return heaps;
}

// The blocks the allocators annotated (annotate.h), for reports only.
struct BlockRec {
  size_t requested, size;
  bool live;
};
std::mutex g_blocks_mu;
std::map<uintptr_t, BlockRec>& blocks() {
  static auto* m = new std::map<uintptr_t, BlockRec>;
  return *m;
}

void note_block(uintptr_t p, size_t requested, size_t size, bool live) {
  std::lock_guard<std::mutex> g(g_blocks_mu);
  auto& m = blocks();
  // A new block replaces the records it overlaps (blocks merge and split).
  auto it = m.lower_bound(p);
  if (it != m.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size > p) it = prev;
  }
  while (it != m.end() && it->first < p + size) it = m.erase(it);
  m[p] = BlockRec{requested, size, live};
}

void forget_blocks(uintptr_t p, size_t size) {
  std::lock_guard<std::mutex> g(g_blocks_mu);
  auto& m = blocks();
  for (auto it = m.lower_bound(p); it != m.end() && it->first < p + size;) it = m.erase(it);
}

std::mutex g_pinned_mu;
std::map<uintptr_t, size_t>& pinned() {
  static auto* m = new std::map<uintptr_t, size_t>;
  return *m;
}

struct Segment {
  uintptr_t lo, hi;
  bool writable;
};
std::vector<Segment>& image() {
  static auto* segs = [] {
    auto* v = new std::vector<Segment>;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
          auto* out = static_cast<std::vector<Segment>*>(data);
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const auto& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_LOAD) continue;
            const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
            out->push_back({lo, lo + ph.p_memsz, (ph.p_flags & PF_W) != 0});
          }
          return 0;
        },
        v);
    return v;
  }();
  return *segs;
}

}  // namespace

const Heap* g_heap = nullptr;

const Heap& heap() {
  // g_heap is written once, inside the initialisation every other thread synchronises with
  // (a thread-safe static), before any device memory exists to be accessed.
  static const Heap* h = [] {
    const Heap* made = new Heap(make_heap());  // leaked: device memory outlives static destructors
    g_heap = made;
    return made;
  }();
  return *h;
}

int& current_device() {
  thread_local int d = 0;
  return d;
}

namespace {
std::atomic<uint64_t> g_contexts{0};

// Writes the process's contexts to RINGTAPE_EMU_CONTEXTS at exit (Note [Contexts]).
struct ContextReport {
  ~ContextReport() {
    const char* path = std::getenv("RINGTAPE_EMU_CONTEXTS");
    if (!path || !*path) return;
    std::string line = "rank ";
    const char* rank = std::getenv("RANK");
    line += rank && *rank ? rank : "-";
    line += " pid " + std::to_string(getpid()) + " contexts:";
    const uint64_t c = g_contexts.load();
    for (int d = 0; d < 64; ++d)
      if (c >> d & 1) line += " cuda:" + std::to_string(d);
    line += "\n";
    // One write of a short line to a file opened for appending: lines of several processes
    // do not interleave.
    if (FILE* f = std::fopen(path, "a")) {
      std::fwrite(line.data(), 1, line.size(), f);
      std::fclose(f);
    }
  }
} g_context_report;
}  // namespace

void note_context() {
  const int d = current_device();
  if (d >= 0 && d < 64) g_contexts.fetch_or(uint64_t(1) << d, std::memory_order_relaxed);
}

uint64_t contexts() { return g_contexts.load(); }

cudaError_t check_device(int device) {
  return device >= 0 && device < heap().ndev ? cudaSuccess : cudaErrorInvalidDevice;
}

void* device_alloc(int device, size_t bytes) {
  const Heap& h = heap();
  const size_t len = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  DeviceHeap& dh = device_heaps()[device];
  size_t off = 0;
  {
    std::lock_guard<std::mutex> g(dh.mu);
    if (dh.used + len > h.limit) return nullptr;
    const size_t taken = len + kRedZone;  // Note [Red zones]
    auto it = dh.free_ranges.begin();
    while (it != dh.free_ranges.end() && it->second < taken) ++it;
    if (it == dh.free_ranges.end()) return nullptr;
    off = it->first;
    const size_t rest = it->second - taken;
    dh.free_ranges.erase(it);
    if (rest) dh.free_ranges[off + taken] = rest;
    dh.allocated[off] = len;
    dh.used += len;
  }
  auto* p = reinterpret_cast<uint8_t*>(h.base + size_t(device) * h.span + off);
  RT_EMU_UNPOISON(p, bytes);
  std::memset(p, 0xFF, bytes);  // fresh memory reads as NaN in every float type
  mark(p, bytes, kUninit);
  mark(p + bytes, len - bytes, kNoAccess);
  note_block(uintptr_t(p), bytes, len, true);
  return p;
}

cudaError_t device_free(const void* ptr) {
  const Heap& h = heap();
  const auto a = reinterpret_cast<uintptr_t>(ptr);
  const int device = h.device_of(a);
  if (device < 0) return cudaErrorInvalidValue;
  DeviceHeap& dh = device_heaps()[device];
  const size_t off = a - h.base - size_t(device) * h.span;
  size_t len = 0;
  {
    std::lock_guard<std::mutex> g(dh.mu);
    auto it = dh.allocated.find(off);
    if (it == dh.allocated.end()) return cudaErrorInvalidValue;
    len = it->second;
    dh.allocated.erase(it);
    dh.used -= len;
    // Merge with the free neighbours; the red zone goes back with the block (Note [Red zones]).
    size_t lo = off, n = len + kRedZone;
    auto next = dh.free_ranges.lower_bound(off);
    if (next != dh.free_ranges.end() && next->first == off + n) {
      n += next->second;
      next = dh.free_ranges.erase(next);
    }
    if (next != dh.free_ranges.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        lo = prev->first;
        n += prev->second;
        dh.free_ranges.erase(prev);
      }
    }
    dh.free_ranges[lo] = n;
  }
  forget_blocks(a, len);
  // Whole pages go back to the system; their shadow reads kNoAccess (zero) again.
  const uintptr_t page = 4096, plo = (a + page - 1) & ~(page - 1), phi = (a + len) & ~(page - 1);
  if (phi > plo + 16 * page) {
    madvise(reinterpret_cast<void*>(plo), phi - plo, MADV_DONTNEED);
    madvise(h.shadow + (plo - h.base), phi - plo, MADV_DONTNEED);
  }
  mark(ptr, len, kNoAccess);
  RT_EMU_POISON(const_cast<void*>(ptr), len);
  return cudaSuccess;
}

size_t device_used(int device) {
  DeviceHeap& dh = device_heaps()[device];
  std::lock_guard<std::mutex> g(dh.mu);
  return dh.used;
}

void mark(const void* p, size_t n, Shadow s) {
  const Heap& h = heap();
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (n == 0 || !h.contains(a)) return;
  std::memset(h.shadow + (a - h.base), s, n);
}

std::string describe_device_address(uintptr_t a) {
  const Heap& h = heap();
  char buf[256];
  std::lock_guard<std::mutex> g(g_blocks_mu);
  auto& m = blocks();
  auto it = m.upper_bound(a);
  if (it != m.begin()) {
    --it;
    const uintptr_t p = it->first;
    const BlockRec& b = it->second;
    if (a < p + b.size) {
      if (!b.live)
        std::snprintf(buf, sizeof buf, "inside the free %zu-byte block at %#" PRIxPTR " (offset %" PRIuPTR "), which the allocator has cached", b.size, p, a - p);
      else if (a >= p + b.requested)
        std::snprintf(buf, sizeof buf, "%" PRIuPTR " bytes past the end of the %zu-byte block at %#" PRIxPTR, a - p - b.requested,
                      b.requested, p);
      else
        std::snprintf(buf, sizeof buf, "at offset %" PRIuPTR " of the %zu-byte block at %#" PRIxPTR, a - p, b.requested, p);
      return buf;
    }
    std::snprintf(buf, sizeof buf, "%" PRIuPTR " bytes past the end of the %zu-byte block at %#" PRIxPTR ", in no block",
                  a - p - b.requested, b.requested, p);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "in unallocated memory of cuda:%d", h.device_of(a));
  return buf;
}

bool is_pinned(const void* p, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(g_pinned_mu);
  auto& m = pinned();
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  return a + n <= it->first + it->second;
}

void* pinned_alloc(size_t bytes) {
  const size_t len = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  void* p = std::aligned_alloc(kAlign, len);
  if (!p) return nullptr;
  std::lock_guard<std::mutex> g(g_pinned_mu);
  pinned()[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

cudaError_t pinned_free(void* p) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard<std::mutex> g(g_pinned_mu);
    if (pinned().erase(reinterpret_cast<uintptr_t>(p)) == 0) return cudaErrorInvalidValue;
  }
  std::free(p);
  return cudaSuccess;
}

bool in_program_image(uintptr_t a, size_t n, bool write) {
  for (const Segment& s : image())
    if (a >= s.lo && a + n <= s.hi) return !write || s.writable;
  return false;
}

// ---- the emu.h queries ----------------------------------------------------------------------
int device_of(const void* p) { return heap().device_of(reinterpret_cast<uintptr_t>(p)); }
bool is_pinned_host(const void* p, size_t bytes) { return is_pinned(p, bytes); }
int64_t first_uninitialised(const void* p, size_t bytes) {
  const Heap& h = heap();
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (!h.contains(a)) return -1;
  const uint8_t* s = h.shadow + (a - h.base);
  for (size_t i = 0; i < bytes; ++i)
    if (s[i] != kInit) return int64_t(i);
  return -1;
}

}  // namespace rt::emu

using namespace rt::emu;

namespace {

// Note [Stream-ordered annotations] in annotate.h.
void annotate(const void* p, void* stream, const char* what, std::function<void()> mark_it) {
  const int device = heap().device_of(reinterpret_cast<uintptr_t>(p));
  CUstream_st* s = resolve_on(static_cast<cudaStream_t>(stream), device);
  if (!s) return mark_it();  // its stream is gone: nothing of it is still queued
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::host;
  op->name = what;
  op->fn = std::move(mark_it);
  if (submit(s, std::move(op)) != cudaSuccess) return;  // a faulted device runs nothing more
}

}  // namespace

extern "C" void rt_emu_block_handed_out(const void* p, size_t requested, size_t size, void* stream) {
  if (!heap().contains(reinterpret_cast<uintptr_t>(p))) return;
  annotate(p, stream, "allocator: block handed out", [p, requested, size] {
    RT_EMU_UNPOISON(const_cast<void*>(p), requested);
    std::memset(const_cast<void*>(p), 0xFF, requested);
    mark(p, requested, kUninit);
    mark(static_cast<const uint8_t*>(p) + requested, size - requested, kNoAccess);
    RT_EMU_POISON(const_cast<uint8_t*>(static_cast<const uint8_t*>(p) + requested), size - requested);
    note_block(reinterpret_cast<uintptr_t>(p), requested, size, true);
  });
}

extern "C" void rt_emu_block_cached(const void* p, size_t size, void* stream) {
  if (!heap().contains(reinterpret_cast<uintptr_t>(p))) return;
  annotate(p, stream, "allocator: block cached", [p, size] {
    mark(p, size, kFreed);
    RT_EMU_POISON(const_cast<void*>(p), size);
    note_block(reinterpret_cast<uintptr_t>(p), 0, size, false);
  });
}
