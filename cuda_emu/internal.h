// What the parts of the emulated device share (devices and memory, streams and their
// operations, kernel launches, faults). Not for the engine or the kernels: they see only
// the CUDA API, cuda_emu/simt.h and cuda_emu/emu.h.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda_emu/emu.h"
#include "cuda_emu/simt.h"

namespace rt::emu {

// ---- kernel coverage (coverage.cc) -------------------------------------------------------------
// Logs the first launch of the site's instantiation in this process (Note [Kernel coverage]).
void note_launched(const LaunchSite& site);

// ---- devices and their memory (device.cc) -----------------------------------------------------
// Note [One reservation]
// The memory of every emulated device lies in one address range reserved at the first use
// (MAP_NORESERVE: pages exist only once touched), device d at base + d * span. Whether an
// address is device memory, and whose, is then arithmetic, which every load and store of a
// kernel asks (memcheck.cc). Beside it lie two shadows: one state byte per byte (Shadow),
// and per 64-byte granule the last writing operation and the reading ones (stream, sequence
// number) for the cross-stream hazard check (Note [Readers per stream] in memcheck.cc).
enum Shadow : uint8_t { kNoAccess = 0, kUninit = 1, kInit = 2, kFreed = 3 };
constexpr int kGranuleShift = 6;
constexpr int kReaders = 4;  // reading operations kept per granule

// Per 4-byte word of device memory, the last write and the last read(s) of the launch that
// made them, for the race check between blocks (Note [Races between blocks] in memcheck.cc).
struct RaceRecord {
  std::atomic<uint64_t> tag;  // launch, block, thread, bytes of the word, atomic, several blocks
  std::atomic<uint64_t> pc;   // the access's instruction
};
struct RaceCell {
  RaceRecord w, r;
};

struct Heap {
  uintptr_t base = 0;
  size_t span = 0;   // bytes per device: its memory limit rounded up to a power of two
  int span_shift = 0;
  size_t limit = 0;  // what cudaMemGetInfo reports as total
  int ndev = 0;      // visible to this process
  int physical[64] = {};  // [ndev]: the emulated machine's number of each (CUDA_VISIBLE_DEVICES)
  size_t total = 0;  // span * ndev
  uint8_t* shadow = nullptr;                  // [total]
  std::atomic<uint64_t>* writer = nullptr;    // [total >> kGranuleShift]
  std::atomic<uint64_t>* reader = nullptr;    // [total >> kGranuleShift][kReaders]
  RaceCell* race = nullptr;                   // [total >> 2]; null under a sanitizer's variant
  bool contains(uintptr_t a) const { return a - base < total; }
  int device_of(uintptr_t a) const { return contains(a) ? int((a - base) >> span_shift) : -1; }
};
// Set once, before any device memory exists (the kernels' access checks read it directly).
extern const Heap* g_heap;
const Heap& heap();

int& current_device();  // of the calling host thread
// Note [Contexts]
// On a GPU a process gets a context on a device (hundreds of MB of its memory) the first
// time a host thread whose current device it is makes a call that needs one; a thread that
// never called cudaSetDevice has device 0. note_context() records the calling thread's
// current device; RINGTAPE_EMU_CONTEXTS=FILE appends, at exit, one line per process: "rank R
// pid P contexts: cuda:0 cuda:1", so a test can check that each rank of a data-parallel run
// touched its own GPU only.
void note_context();
uint64_t contexts();  // bit d: a context on cuda:d
cudaError_t check_device(int device);
void* device_alloc(int device, size_t bytes);  // nullptr when the device's limit is reached
cudaError_t device_free(const void* p);
size_t device_used(int device);
void mark(const void* p, size_t n, Shadow s);
// Where `a` lies, for reports: "12 bytes past the end of the 1024-byte block at 0x..".
std::string describe_device_address(uintptr_t a);

bool is_pinned(const void* p, size_t n);    // inside one pinned host allocation
void* pinned_alloc(size_t bytes);
cudaError_t pinned_free(void* p);
// Inside the program's loaded segments (code, constants, globals); `write` asks for a
// writable one.
bool in_program_image(uintptr_t a, size_t n, bool write);

// ---- errors (report.cc) ------------------------------------------------------------------------
// The thread's error for cudaGetLastError / cudaPeekAtLastError.
void set_last_error(cudaError_t e);
cudaError_t peek_last_error();
cudaError_t take_last_error();  // and clears it
// Note [Sticky faults]
// A fault inside device work (a kernel's bad access, a failed check) ends the device's
// context as on a GPU: the report goes to stderr at once, the device's queued and later
// work is skipped, and every later call on the device returns the error.
cudaError_t sticky_error(int device);
void set_sticky(int device, cudaError_t e, const std::string& report);
std::string symbolize(const void* pc);  // "file:line (function)" where line tables allow
// The source lines of the instruction before `pc` (a return address), innermost first, then
// each call site it was inlined at; empty without debug information. Cached per address.
std::vector<std::string> inline_chain(const void* pc);
// The demangled name of the function at `fn` ("void rt::cuda::k<float>(long, float*)"), or "".
std::string function_name(const void* fn);

// ---- vector clocks (stream.cc) -------------------------------------------------------------------
// Note [Cross-stream hazards]
// Each stream numbers its operations; each operation carries the clock of what is ordered
// before it (its stream's earlier work, every event it waited for, everything the host had
// seen complete when it was queued). Device memory remembers per granule which operation
// last wrote it and which last read it; an access whose clock does not cover that operation
// is a hazard (the check of PyTorch's CUDA sanitizer, made at each access instead of at
// each op's declared arguments).
struct Clock {
  std::vector<uint64_t> seq;  // by stream uid
  uint64_t at(uint32_t uid) const { return uid < seq.size() ? seq[uid] : 0; }
  void set(uint32_t uid, uint64_t s);
  void join(const Clock& o);
};
inline uint64_t pack_access(uint32_t uid, uint64_t seq) { return (uint64_t(uid) << 48) | seq; }
inline uint32_t access_uid(uint64_t a) { return uint32_t(a >> 48); }
inline uint64_t access_seq(uint64_t a) { return a & ((uint64_t(1) << 48) - 1); }
std::string stream_name(uint32_t uid);
std::string op_name(uint64_t packed);  // the recent operation (uid, seq), for reports

// ---- operations on streams (stream.cc) -------------------------------------------------------------
struct KernelLaunch {
  LaunchSite site;
  dim3 grid, block;
  size_t dynamic_smem = 0;
  KernelEntry entry = nullptr;
  std::shared_ptr<const void> args;
  size_t args_bytes = 0;
  uint64_t id = 0;  // launch number: seeds the thread order
  double flops = 0;   // the launcher's hint (rt::cuda::flops_hint), for the kernel lab
  bool flops_f64 = false;
};

struct LaunchPerf;

struct Op {
  enum class Kind { kernel, copy, memset, library, record, wait, host };
  Kind kind = Kind::host;
  std::string name;
  int device = 0;
  uint32_t stream_uid = 0;
  uint64_t seq = 0;
  Clock clock;
  std::vector<MemUse> uses;            // copy, memset, library: checked, then marked
  std::function<void()> fn;            // copy, memset, library, host: the work
  // Work with host-side state per execution (emu.h, enqueue_issued): called when the op is
  // queued, it gives `fn`; a captured op keeps it, and each graph launch calls it anew.
  std::function<std::function<void()>()> issue;
  std::unique_ptr<KernelLaunch> kernel;
  uint64_t correlation_id = 0;         // CUPTI's
  std::vector<uint64_t> external_ids;  // CUPTI external correlation at the launch
  size_t bytes = 0;                    // copies and memsets
  int copy_kind = 0;                   // cudaMemcpyKind
  std::function<bool()> ready;         // wait: true once the awaited work is done
  bool writes_discarded = false;       // set by discard_writes() inside its work
  bool skipped = false;                // not run: the device had faulted before it
  bool perf = false;                   // recorded by the kernel lab (perf_recording() when queued)
  bool graph_node = false;             // queued by a graph launch (Note [Graph replay] in cuda_emu/graph.cc)
  std::shared_ptr<LaunchPerf> launch_perf;      // a recorded kernel's counters while it runs
  std::shared_ptr<const LibraryCost> library_cost;  // a library call's, for the lab
};

// The operation the calling thread executes (null outside device work).
Op* current_op();

// ---- kernels (executor.cc, memcheck.cc) ---------------------------------------------------------
void run_kernel(Op& op);  // every block; a fault raises OpFault after the report
// A fresh launch number (KernelLaunch::id): each replay of a captured kernel draws its own
// thread order, as each eager launch does.
uint64_t new_launch_id();

struct OpFault {
  cudaError_t code;
  std::string report;
};

// The GPU thread being run on this host thread (null outside kernel code).
struct ThreadCtx;
extern thread_local ThreadCtx* tls_thread;
// Suspends the faulting GPU thread for good after its report (the block and the launch
// end); never returns into the kernel.
[[noreturn]] void thread_fault(cudaError_t code, const std::string& what, const void* pc);
std::string thread_where(const ThreadCtx& t);  // kernel, launch site, block, thread

// Memory checks of host-side operations (copies, library calls): bounds, device,
// initialised reads and cross-stream hazards of each use, then its writes marked.
void check_uses(const Op& op);
void mark_uses(const Op& op);

}  // namespace rt::emu
