// The SIMT executor: runs a kernel launch's blocks in parallel over a pool of host
// threads, and the GPU threads of each block as fibers on one host thread.
//
// Note [Fibers]
// A GPU thread must be able to stop at a barrier or warp operation and let the others of
// its block run, so it runs on a stack of its own, switched with Boost.Context's fcontext
// (a few instructions, no system call; glibc's swapcontext makes a system call per switch
// and was ~10x too slow for a million threads with barriers). Most kernels never wait, so a
// stack is not made per thread: a runner fiber starts the block's threads one after the
// other on its stack, and only when one of them waits does that runner stay with it, and
// the scheduler starts a new runner for the threads not yet started. A thread that finishes
// after waiting goes on starting threads on its runner. Stacks come from the host thread's
// worker, reused from block to block. A thread that faults is never resumed; its block is
// dropped without unwinding (nothing else refers to its stack), and its worker is
// retired (Note [Worker ownership]).
//
// Note [Thread order]
// A GPU may run the threads of a block in any order and interleave them at any instruction;
// a kernel whose result depends on one order (a missing barrier, a non-atomic update of
// global memory by several threads) is wrong. RINGTAPE_EMU_SCHEDULE chooses how the emulator
// orders them, RINGTAPE_EMU_SEED (default 1) seeds the draws:
//   shuffle     (the default) between two barriers the threads run one after the other, each
//               until it waits, in an order drawn anew for every epoch from the seed, the
//               launch number and the block;
//   reverse     the same, in reverse thread order every epoch (the last thread first);
//   interleave  every thread is switched out before each of its global or shared memory
//               accesses, and the threads resume in thread order: each access of one thread
//               waits for the same access of every other (lanes interleaved per access, as
//               lock-step warps would be), so a read-modify-write of one location by several
//               threads loses updates;
//   random      before each global or shared access a thread is switched out with probability
//               1/4 (seeded per block), and the threads resume in the epoch's shuffled order.
// A fault's report names the schedule and seed that reproduce it (block_where). Beside these,
// the race check reports unordered shared-memory accesses directly (memcheck.cc).
//
// Note [Fibers under ThreadSanitizer]
// Under --config=cuda-emu-tsan each runner is a TSan fiber, and every switch releases and
// acquires the worker's `tsan_sync` (the scheduler and the runners share the block's
// state), so TSan sees a block's GPU threads as ordered, as they run here: it reports races
// between blocks run by different host threads (global memory written by two blocks without
// atomics) and in the host code, the emulator's and the engine's. Races within a block are
// the emulator's own check's (Note [Shared-memory races] in memcheck.cc). The switches
// themselves do not synchronise (__tsan_switch_to_fiber_no_sync): TSan's synchronising
// switch releases on the address of the target's ThreadState, which for a host thread lies
// in TSan's own thread-local storage, and crashed there (gcc 12's libtsan, elementwise and
// optim tests); a heap address of our own is what TSan's annotations are meant for.
//
// Note [Barrier instances]
// Every live thread of a block must arrive at the same barrier instruction, not only at the
// same source line: a helper with a __syncthreads (a block-wide sum) inlined into two branches
// is one line but two barriers, on a GPU (where nvcc inlines device functions) as here, and
// threads split between them never meet. A thread at a barrier carries the address it called
// sync_block from, which differs between inlined copies. g++ also copies code that nvcc would
// not copy past a barrier (jump threading, tail duplication: a barrier after `if (t == 0)` and
// before `if (t < 16)` becomes one copy for thread 0 and one for the others): two addresses
// are one barrier when their source lines and the call sites they were inlined at (the debug
// information's inline chain, inline_chain) are the same. A helper that g++ does not inline
// (its one barrier then serves both branches) is not told apart, though nvcc may have inlined
// it: tests/cuda_emu/planted.cu forces the inlining of its planted helper.
//
// Note [Warp operations]
// Shuffles, votes and __syncwarp wait until every lane of their mask is at a warp operation
// with the same mask; the last lane to arrive computes every lane's result. A mask that
// names a lane which has exited (or does not exist: the last warp of a block that is not a
// multiple of 32), or a lane of the mask waiting elsewhere forever, is a fault that names
// both.
//
// Launch limits are an H200's (executor.h): 1024 threads per block, block dimensions up to
// (1024, 1024, 64), grid up to (2^31 - 1, 65535, 65535), 48 KiB of shared memory per block
// (an H200 allows up to 227 KiB after cudaFuncSetAttribute, which is not emulated).
#include "cuda_emu/executor.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "cuda_emu/graph.h"
#include "cuda_emu/perf.h"
#include "cuda_emu/stream.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/lsan_interface.h>
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>

// oneDNN (the CPU reference convolutions of the GPU tests) runs on OpenMP threads that
// synchronise inside uninstrumented libgomp, so TSan would report its memset of scratch the
// main thread allocated as a race; its calls into TSan's interceptors are not ours to check.
extern "C" const char* __tsan_default_suppressions() { return "called_from_lib:libdnnl.so.2\n"; }
#endif

namespace bc = boost::context::detail;

namespace rt::emu {

thread_local ThreadCtx* tls_thread = nullptr;

namespace {

constexpr size_t kStackBytes = 128 * 1024;  // per GPU thread, touched only as deep as it goes
constexpr size_t kGuardBytes = 4096;

}  // namespace

uint64_t env_seed() {
  static const uint64_t seed = [] {
    const char* v = std::getenv("RINGTAPE_EMU_SEED");
    if (!v || !*v) return uint64_t(1);
    char* end = nullptr;
    const unsigned long long s = std::strtoull(v, &end, 10);
    if (*end) {
      std::fprintf(stderr, "cuda-emu: RINGTAPE_EMU_SEED='%s' is not a number; unset it or set it to e.g. 7\n", v);
      std::_Exit(2);
    }
    return uint64_t(s);
  }();
  return seed;
}

Schedule env_schedule() {
  static const Schedule s = [] {
    const char* v = std::getenv("RINGTAPE_EMU_SCHEDULE");
    const std::string name = v ? v : "";
    if (name.empty() || name == "shuffle") return Schedule::shuffle;
    if (name == "reverse") return Schedule::reverse;
    if (name == "interleave") return Schedule::interleave;
    if (name == "random") return Schedule::random;
    std::fprintf(stderr, "cuda-emu: RINGTAPE_EMU_SCHEDULE='%s' is not a schedule: use shuffle (the default), reverse, "
                 "interleave or random (Note [Thread order])\n", v);
    std::_Exit(2);
  }();
  return s;
}

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::shuffle: return "shuffle";
    case Schedule::reverse: return "reverse";
    case Schedule::interleave: return "interleave";
    case Schedule::random: return "random";
  }
  return "?";
}

namespace {

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// ---- per host thread: fiber stacks and the shared-memory arena ------------------------------
struct Worker {
  uint8_t* stacks = nullptr;  // kMaxThreadsPerBlock slots of guard + stack
  std::vector<int> free_slots;
  uint8_t* smem = nullptr;    // kStaticSmemLimit bytes
  SmemCell* smem_shadow = nullptr;
  uint32_t gen = 0;
  std::vector<ThreadCtx> threads;
  std::vector<uint32_t> order;
  std::vector<Runner> runners = std::vector<Runner>(kMaxThreadsPerBlock);  // by stack slot
#if defined(__SANITIZE_THREAD__)
  std::vector<void*> tsan_fibers;
  void* tsan_self = nullptr;
  char tsan_sync = 0;  // the address every switch releases and acquires (Note [Fibers under ThreadSanitizer])
#endif

  Worker() {
    const size_t slot = kGuardBytes + kStackBytes;
    void* p = mmap(nullptr, slot * kMaxThreadsPerBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "cuda-emu: cannot map fiber stacks\n");
      std::abort();
    }
    stacks = static_cast<uint8_t*>(p);
    for (unsigned i = 0; i < kMaxThreadsPerBlock; ++i) mprotect(stacks + i * slot, kGuardBytes, PROT_NONE);
    for (int i = int(kMaxThreadsPerBlock) - 1; i >= 0; --i) free_slots.push_back(i);
    smem = static_cast<uint8_t*>(std::aligned_alloc(256, kStaticSmemLimit));
    smem_shadow = static_cast<SmemCell*>(std::calloc(kStaticSmemLimit, sizeof(SmemCell)));
    threads.reserve(kMaxThreadsPerBlock);
#if defined(__SANITIZE_THREAD__)
    tsan_fibers.resize(kMaxThreadsPerBlock, nullptr);
#endif
  }
  uint8_t* stack_lo(int slot) const { return stacks + size_t(slot) * (kGuardBytes + kStackBytes) + kGuardBytes; }
};

// Note [Worker ownership]
// Workers belong to the process and are lent to one host thread at a time; a thread that ends
// gives its worker back for the next thread that needs one (stream workers come and go with
// streams). A worker whose block faulted is retired instead: the faulted threads' frames are
// never unwound (Note [Fibers]), so what they own stays where they left it. Its stacks are
// kept, and scanned as roots under LeakSanitizer, so that memory is held rather than leaked.
// A fault costs one worker (about 1 MiB touched, one mapping once its guard pages are lifted);
// a fault ends its device's context anyway
// (sticky errors).
struct Workers {
  std::mutex mu;
  std::vector<Worker*> idle, retired;
};
Workers& workers() {
  static auto* w = new Workers;
  return *w;
}

struct WorkerLease {
  Worker* w = nullptr;
  ~WorkerLease() {
    if (!w) return;
    std::lock_guard<std::mutex> g(workers().mu);
    workers().idle.push_back(w);
  }
};
thread_local WorkerLease tls_worker;

Worker& worker() {
  if (Worker* w = tls_worker.w) return *w;
  {
    std::lock_guard<std::mutex> g(workers().mu);
    if (!workers().idle.empty()) {
      tls_worker.w = workers().idle.back();
      workers().idle.pop_back();
    }
  }
  if (!tls_worker.w) tls_worker.w = new Worker;
#if defined(__SANITIZE_THREAD__)
  tls_worker.w->tsan_self = nullptr;  // this host thread's own fiber, learnt on first entry
#endif
  return *tls_worker.w;
}

// The calling thread's worker, after a faulted block left runners on `busy` slots.
void retire_worker(Worker& w, const std::vector<int>& busy) {
#if defined(__SANITIZE_ADDRESS__)
  for (int slot : busy) __lsan_register_root_region(w.stack_lo(slot), kStackBytes);
#else
  (void)busy;
#endif
  // Its guard pages go (the stacks are never run again): each was a mapping of its own, and a
  // process may hold only vm.max_map_count (65530) of them, which 30 retired workers reached.
  mprotect(w.stacks, (kGuardBytes + kStackBytes) * kMaxThreadsPerBlock, PROT_READ | PROT_WRITE);
  std::lock_guard<std::mutex> g(workers().mu);
  workers().retired.push_back(&w);
  if (tls_worker.w == &w) tls_worker.w = nullptr;
}

// ---- fiber switches --------------------------------------------------------------------------
// Under AddressSanitizer every switch is announced with the stack it goes to (its fake
// stacks and the shadow of the old one depend on it); a runner learns the scheduler's stack
// when it is first entered.
#if defined(__SANITIZE_ADDRESS__)
#define RT_EMU_SWITCH_TO(save, lo, size) __sanitizer_start_switch_fiber(save, reinterpret_cast<const void*>(lo), size)
#define RT_EMU_SWITCHED(save, from_lo, from_size) __sanitizer_finish_switch_fiber(save, from_lo, from_size)
#else
#define RT_EMU_SWITCH_TO(save, lo, size) ((void)(save), (void)(lo), (void)(size))
#define RT_EMU_SWITCHED(save, from_lo, from_size) ((void)(save), (void)(from_lo), (void)(from_size))
#endif

thread_local void* tls_fake_stack = nullptr;  // AddressSanitizer's, of the scheduler

#if defined(__SANITIZE_THREAD__)
// Tells TSan the host thread now runs `fiber` (Note [Fibers under ThreadSanitizer]): what the
// old fiber did happens before everything the new one does, the jump's own reads included.
// Inlined: a function of its own would enter on one fiber's shadow stack and exit on the other's.
[[gnu::always_inline]] inline void tsan_switch(Worker& w, void* fiber) {
  __tsan_release(&w.tsan_sync);
  __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync);
  __tsan_acquire(&w.tsan_sync);
}
#endif

struct Job;
void check_exit_against_warp(BlockCtx& b, ThreadCtx& th);

// A runner: starts the block's threads not yet started, in order, until none is left
// (Note [Fibers]); returns to the scheduler whenever the thread on it waits.
// Not instrumented under TSan: it never returns (its last act is a jump away), so its
// function-entry record would pile up on the reused TSan fiber, one per block, until TSan's
// shadow stack overflowed (a crash in elementwise_cuda_test's thousands of blocks).
#if defined(__SANITIZE_THREAD__)
__attribute__((no_sanitize_thread))
#endif
void runner_main(bc::transfer_t t) {
  auto* r = static_cast<Runner*>(t.data);
  r->sched = t.fctx;
  RT_EMU_SWITCHED(nullptr, &r->sched_stack, &r->sched_stack_size);
  BlockCtx& b = *r->block;
  const KernelLaunch& L = *b.launch;
  while (b.next_fresh < b.nthreads && !b.faulted) {
    ThreadCtx& th = (*b.threads)[(*b.order)[b.next_fresh++]];
    th.runner = r;
    th.stack_lo = r->stack_lo;
    th.stack_hi = r->stack_hi;
    th.state = TState::running;
    r->current = &th;
    tls_thread = &th;
    L.entry(L.args.get());
    tls_thread = nullptr;
    th.state = TState::done;
    ++b.finished;
    check_exit_against_warp(b, th);
  }
  r->current = nullptr;
  r->done = true;
  RT_EMU_SWITCH_TO(nullptr, r->sched_stack, r->sched_stack_size);  // this stack is done with
#if defined(__SANITIZE_THREAD__)
  tsan_switch(worker(), worker().tsan_self);
#endif
  bc::jump_fcontext(r->sched, r);
  __builtin_unreachable();
}

// From a GPU thread back to its block's scheduler; returns when resumed.
void yield(ThreadCtx& th) {
  Runner& r = *th.runner;
  tls_thread = nullptr;
  void* fake = nullptr;
  RT_EMU_SWITCH_TO(&fake, r.sched_stack, r.sched_stack_size);
#if defined(__SANITIZE_THREAD__)
  tsan_switch(worker(), worker().tsan_self);
#endif
  bc::transfer_t t = bc::jump_fcontext(r.sched, &r);
  RT_EMU_SWITCHED(fake, &r.sched_stack, &r.sched_stack_size);
  r.sched = t.fctx;
  tls_thread = &th;
}

// Into a runner (a new one, or the one of a waiting thread), until its thread waits or it
// has no thread left to start.
void enter(Worker& w, Runner& r) {
  RT_EMU_SWITCH_TO(&tls_fake_stack, r.stack_lo, kStackBytes);
#if defined(__SANITIZE_THREAD__)
  if (!w.tsan_self) w.tsan_self = __tsan_get_current_fiber();
  tsan_switch(w, w.tsan_fibers[size_t(r.slot)]);
#endif
  bc::transfer_t t = bc::jump_fcontext(r.ctx, &r);
  RT_EMU_SWITCHED(tls_fake_stack, nullptr, nullptr);
  r.ctx = t.fctx;
  if (r.done) w.free_slots.push_back(r.slot);
}

void start_runner(Worker& w, BlockCtx& b) {
  const int slot = w.free_slots.back();
  w.free_slots.pop_back();
  Runner& r = w.runners[size_t(slot)];
  r = Runner{};
  r.slot = slot;
  r.block = &b;
  uint8_t* lo = w.stack_lo(slot);
  r.stack_lo = uintptr_t(lo);
  r.stack_hi = uintptr_t(lo + kStackBytes);
  r.ctx = bc::make_fcontext(lo + kStackBytes, kStackBytes, runner_main);
#if defined(__SANITIZE_THREAD__)
  if (!w.tsan_fibers[size_t(slot)]) w.tsan_fibers[size_t(slot)] = __tsan_create_fiber(0);
#endif
  enter(w, r);
}

// ---- faults ------------------------------------------------------------------------------------
thread_local Job* tls_job = nullptr;

struct Job {
  Op* op = nullptr;
  uint64_t nblocks = 0;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> finished{0};
  std::atomic<bool> faulted{false};
  std::mutex mu;
  std::condition_variable cv;
  OpFault fault{cudaSuccess, ""};

  void set_fault(cudaError_t code, const std::string& report) {
    std::lock_guard<std::mutex> g(mu);
    if (faulted.load()) return;
    fault = OpFault{code, report};
    faulted.store(true);
  }
};

std::string dims(uint3 d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "(%u,%u,%u)", d.x, d.y, d.z);
  return buf;
}
std::string dims(dim3 d) { return dims(uint3{d.x, d.y, d.z}); }

std::string block_where(const BlockCtx& b) {
  const KernelLaunch& L = *b.launch;
  return "  in kernel " + std::string(L.site.kernel) + " launched at " + L.site.file + ":" + std::to_string(L.site.line) +
         " on cuda:" + std::to_string(b.op->device) + " (grid " + dims(L.grid) + ", block " + dims(L.block) +
         ")\n  thread order: " + emulation_settings() + " (Note [Thread order] in cuda_emu/executor.cc)\n  block " +
         dims(b.idx);
}

std::string site(const std::source_location& w) {
  std::string f = w.file_name();
  return f + ":" + std::to_string(w.line());
}

const char* wop_name(WarpOp op) {
  switch (op) {
    case WarpOp::sync: return "__syncwarp";
    case WarpOp::shfl: return "__shfl_sync";
    case WarpOp::shfl_up: return "__shfl_up_sync";
    case WarpOp::shfl_down: return "__shfl_down_sync";
    case WarpOp::shfl_xor: return "__shfl_xor_sync";
    case WarpOp::ballot: return "__ballot_sync";
    case WarpOp::any: return "__any_sync";
    case WarpOp::all: return "__all_sync";
  }
  return "a warp operation";
}

// A fault found by the scheduler (not inside one thread): the block ends.
void block_fault(BlockCtx& b, cudaError_t code, const std::string& what) {
  b.faulted = true;
  tls_job->set_fault(code, "cuda-emu: " + what + "\n" + block_where(b));
}

// Threads listed compactly: "threads (0,0,0)-(15,0,0)" would need a shape; linear ids do.
std::string thread_list(const std::vector<uint32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += std::to_string(ids[i]);
    if (j > i) s += "-" + std::to_string(ids[j]);
    i = j;
    if (s.size() > 200) {
      s += ", ...";
      break;
    }
  }
  return s;
}

// ---- warp operations (Note [Warp operations]) ------------------------------------------------
// Lanes of `warp` whose bit is in `mask`, as thread pointers (nullptr for lanes that do not
// exist).
ThreadCtx* lane_thread(BlockCtx& b, uint32_t warp, uint32_t lane) {
  const uint32_t t = warp * 32 + lane;
  return t < b.nthreads ? &(*b.threads)[t] : nullptr;
}

int source_lane(WarpOp op, int lane, int arg, int width) {
  const int seg = lane & ~(width - 1);
  switch (op) {
    case WarpOp::shfl: return seg + (arg & (width - 1));
    case WarpOp::shfl_up: return lane - arg >= seg ? lane - arg : lane;
    case WarpOp::shfl_down: return lane + arg < seg + width ? lane + arg : lane;
    case WarpOp::shfl_xor: {
      const int s = lane ^ arg;
      return s >= seg && s < seg + width ? s : lane;
    }
    default: return lane;
  }
}

// Called when `th` arrives: resolves the operation if every lane of its mask is there.
// Returns false after a fault.
bool try_resolve_warp(BlockCtx& b, ThreadCtx& th) {
  const unsigned mask = th.wmask;
  for (uint32_t l = 0; l < 32; ++l) {
    if (!((mask >> l) & 1u)) continue;
    ThreadCtx* o = lane_thread(b, th.warp, l);
    if (!o || o->state == TState::done || o->state == TState::faulted) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s with mask %#010x at %s names lane %u of warp %u, which %s", wop_name(th.wop),
                    mask, site(th.where).c_str(), l, th.warp,
                    !o ? "does not exist (the block's last warp is partial)" : "has exited");
      block_fault(b, cudaErrorIllegalInstruction, std::string(buf) + "; thread " + std::to_string(th.linear) + " waits");
      return false;
    }
    if (o->state != TState::warp) return true;  // not there yet
    if (o->wmask != mask || o->wop != th.wop) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "lanes of warp %u disagree: lane %u is at %s with mask %#010x (%s), lane %u at %s with mask %#010x (%s)",
                    th.warp, th.lane, wop_name(th.wop), mask, site(th.where).c_str(), l, wop_name(o->wop), o->wmask,
                    site(o->where).c_str());
      block_fault(b, cudaErrorIllegalInstruction, buf);
      return false;
    }
  }
  // Everyone is here: compute each lane's result.
  unsigned ballot = 0;
  for (uint32_t l = 0; l < 32; ++l) {
    if (!((mask >> l) & 1u)) continue;
    ThreadCtx* o = lane_thread(b, th.warp, l);
    int pred = 0;
    if (o->wbytes == sizeof(int)) std::memcpy(&pred, o->win, sizeof(int));
    if (pred) ballot |= 1u << l;
  }
  for (uint32_t l = 0; l < 32; ++l) {
    if (!((mask >> l) & 1u)) continue;
    ThreadCtx* o = lane_thread(b, th.warp, l);
    switch (o->wop) {
      case WarpOp::shfl:
      case WarpOp::shfl_up:
      case WarpOp::shfl_down:
      case WarpOp::shfl_xor: {
        const int w = o->wwidth;
        if (w < 1 || w > 32 || (w & (w - 1))) {
          block_fault(b, cudaErrorIllegalInstruction,
                      std::string(wop_name(o->wop)) + " at " + site(o->where) + " with width " + std::to_string(w) +
                          ": the width must be a power of two up to 32");
          return false;
        }
        const int src = source_lane(o->wop, int(l), o->warg, w);
        if (!((mask >> src) & 1u)) {
          block_fault(b, cudaErrorIllegalInstruction,
                      std::string(wop_name(o->wop)) + " at " + site(o->where) + ": lane " + std::to_string(l) +
                          " reads lane " + std::to_string(src) + ", which is not in the mask (an undefined value)");
          return false;
        }
        std::memcpy(o->wout, lane_thread(b, th.warp, uint32_t(src))->win, o->wbytes);
        break;
      }
      case WarpOp::ballot: o->vote = ballot; break;
      case WarpOp::any: o->vote = ballot != 0; break;
      case WarpOp::all: o->vote = ballot == mask; break;
      case WarpOp::sync: break;
    }
  }
  for (uint32_t l = 0; l < 32; ++l) {
    if (!((mask >> l) & 1u)) continue;
    ThreadCtx* o = lane_thread(b, th.warp, l);
    o->state = TState::ready;
    ++o->warp_epoch;
    --b.warp_waiting;
  }
  // Note [Warp order] in memcheck.cc: every lane of the mask is ordered after what every other
  // did before this operation.
  for (uint32_t l = 0; l < 32; ++l) {
    if (!((mask >> l) & 1u)) continue;
    ThreadCtx* o = lane_thread(b, th.warp, l);
    for (uint32_t k = 0; k < 32; ++k)
      if ((mask >> k) & 1u) o->synced_with[k] = lane_thread(b, th.warp, k)->warp_epoch;
  }
  return true;
}

// A thread has exited: lanes waiting on a mask that names it can never go on.
void check_exit_against_warp(BlockCtx& b, ThreadCtx& th) {
  if (b.warp_waiting == 0) return;
  for (uint32_t l = 0; l < 32; ++l) {
    ThreadCtx* o = lane_thread(b, th.warp, l);
    if (o && o->state == TState::warp && ((o->wmask >> th.lane) & 1u)) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s with mask %#010x at %s (lane %u) names lane %u of warp %u, which has exited",
                    wop_name(o->wop), o->wmask, site(o->where).c_str(), l, th.lane, th.warp);
      block_fault(b, cudaErrorIllegalInstruction, buf);
      return;
    }
  }
}

// ---- the scheduler of one block ------------------------------------------------------------------
void shuffle_order(std::vector<uint32_t>& order, const BlockCtx& b, uint64_t linear_block) {
  const Schedule s = env_schedule();
  if (s == Schedule::interleave || s == Schedule::reverse) {  // Note [Thread order]
    const uint32_t n = uint32_t(order.size());
    for (uint32_t t = 0; t < n; ++t) order[t] = s == Schedule::reverse ? n - 1 - t : t;
    return;
  }
  uint64_t x = env_seed() * 0x2545F4914F6CDD1Dull ^ (b.launch->id << 20) ^ (linear_block << 1) ^ (uint64_t(b.epoch) << 44);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[splitmix(x) % i]);
}

// Nobody is ready: a barrier releases, or the block is stuck.
// Two barrier instructions are one barrier of the source (Note [Barrier instances]) when the
// compiler copied it (jump threading, tail duplication: the same line inlined at the same call
// sites), two when a helper was inlined at two call sites.
bool same_barrier(uintptr_t a, uintptr_t b) {
  const std::vector<std::string> ca = inline_chain(reinterpret_cast<const void*>(a));
  return !ca.empty() && ca == inline_chain(reinterpret_cast<const void*>(b));
}

bool release_or_fault(BlockCtx& b) {
  std::vector<ThreadCtx>& ts = *b.threads;
  std::vector<uint32_t> at_barrier, at_warp, exited;
  for (const ThreadCtx& t : ts) {
    if (t.state == TState::barrier) at_barrier.push_back(t.linear);
    else if (t.state == TState::warp) at_warp.push_back(t.linear);
    else if (t.state == TState::done) exited.push_back(t.linear);
  }
  if (!at_barrier.empty() && at_warp.empty() && exited.empty()) {
    const ThreadCtx& first = ts[at_barrier[0]];
    for (uint32_t id : at_barrier) {
      const ThreadCtx& t = ts[id];
      if (t.where.line() != first.where.line() || std::strcmp(t.where.file_name(), first.where.file_name()) != 0) {
        block_fault(b, cudaErrorIllegalInstruction,
                    "barrier divergence: thread " + std::to_string(first.linear) + " waits at __syncthreads at " +
                        site(first.where) + ", thread " + std::to_string(t.linear) + " at " + site(t.where) +
                        " (a __syncthreads in a branch that not every thread of the block takes)");
        return false;
      }
      if (t.barrier != first.barrier && !same_barrier(t.barrier, first.barrier)) {  // Note [Barrier instances]
        block_fault(b, cudaErrorIllegalInstruction,
                    "barrier divergence: threads " + std::to_string(first.linear) + " and " + std::to_string(t.linear) +
                        " wait at two copies of the __syncthreads at " + site(t.where) +
                        " (a helper with a barrier, inlined into branches that not every thread of the block takes: "
                        "two barriers on a GPU, which never meet)");
        return false;
      }
    }
    perf_epoch_end(b);  // no memory instruction spans a barrier (Note [Warp-level requests])
    ++b.epoch;
    for (uint32_t id : at_barrier) ts[id].state = TState::ready;
    return true;
  }
  if (!at_barrier.empty() && !exited.empty()) {
    const ThreadCtx& t = ts[at_barrier[0]];
    block_fault(b, cudaErrorIllegalInstruction,
                "barrier divergence: threads " + thread_list(at_barrier) + " wait at __syncthreads at " + site(t.where) +
                    " but threads " + thread_list(exited) +
                    " of the block have exited (a __syncthreads after an early return or in a branch)");
    return false;
  }
  std::string what = "deadlock: ";
  if (!at_warp.empty()) {
    const ThreadCtx& t = ts[at_warp[0]];
    what += "threads " + thread_list(at_warp) + " wait at " + wop_name(t.wop) + " (" + site(t.where) +
            ") for lanes that never arrive";
  }
  if (!at_barrier.empty()) {
    const ThreadCtx& t = ts[at_barrier[0]];
    what += "; threads " + thread_list(at_barrier) + " wait at __syncthreads (" + site(t.where) + ")";
  }
  block_fault(b, cudaErrorIllegalInstruction, what);
  return false;
}

void run_block(Job& job, uint64_t linear_block) {
  Worker& w = worker();
  const KernelLaunch& L = *job.op->kernel;
  BlockCtx b;
  b.op = job.op;
  b.launch = &L;
  b.device = job.op->device;
  b.me = pack_access(job.op->stream_uid, job.op->seq);
  b.race_self = race_tag(L.id, linear_block, job.nblocks);
  b.clock = &job.op->clock;
  b.idx = uint3{uint32_t(linear_block % L.grid.x), uint32_t(linear_block / L.grid.x % L.grid.y),
                uint32_t(linear_block / (uint64_t(L.grid.x) * L.grid.y))};
  b.nthreads = L.block.x * L.block.y * L.block.z;
  b.gen = ++w.gen;
  if (b.gen == 0) {  // wrapped: old cells could match again
    std::memset(static_cast<void*>(w.smem_shadow), 0, kStaticSmemLimit * sizeof(SmemCell));
    b.gen = ++w.gen;
  }
  b.smem = w.smem;
  b.smem_shadow = w.smem_shadow;
  b.smem_used = (L.dynamic_smem + 15) / 16 * 16;
  std::memset(w.smem, 0xFF, L.dynamic_smem);
  w.threads.resize(b.nthreads);
  for (uint32_t t = 0; t < b.nthreads; ++t) {
    ThreadCtx& th = w.threads[t];
    th.idx = uint3{t % L.block.x, t / L.block.x % L.block.y, t / (L.block.x * L.block.y)};
    th.linear = t;
    th.lane = t % 32;
    th.warp = t / 32;
    th.block = &b;
    th.state = TState::fresh;
    th.runner = nullptr;
    th.warp_epoch = 0;
    std::fill(std::begin(th.synced_with), std::end(th.synced_with), 0u);
  }
  b.threads = &w.threads;
  b.preempt_draws = env_seed() * 0x9E3779B97F4A7C15ull ^ (L.id << 24) ^ linear_block;
  w.order.resize(b.nthreads);
  for (uint32_t t = 0; t < b.nthreads; ++t) w.order[t] = t;
  shuffle_order(w.order, b, linear_block);
  b.order = &w.order;
  if (job.op->launch_perf) perf_block_begin(b);
  const size_t free_before = w.free_slots.size();

  while (!b.faulted && b.finished < b.nthreads) {
    if (job.faulted.load(std::memory_order_relaxed)) {
      b.faulted = true;
      break;
    }
    if (b.next_fresh < b.nthreads) {  // threads not started yet: a runner starts them
      start_runner(w, b);
      continue;
    }
    bool progressed = false;
    for (uint32_t id : w.order) {
      ThreadCtx& th = w.threads[id];
      if (th.state != TState::ready) continue;
      enter(w, *th.runner);
      progressed = true;
      if (b.faulted) break;
    }
    if (progressed || b.faulted || b.finished == b.nthreads) continue;
    const uint32_t epoch = b.epoch;
    if (!release_or_fault(b)) break;
    if (b.epoch != epoch) shuffle_order(w.order, b, linear_block);
  }
  perf_block_end(b);
  if (w.free_slots.size() != free_before) {
    // A faulted block: its runners are dropped without unwinding (Note [Fibers]), and the
    // worker with them (Note [Worker ownership]); under TSan their fibers go, with the
    // frames they never left.
#if defined(__SANITIZE_THREAD__)
    for (void*& f : w.tsan_fibers)
      if (f) __tsan_destroy_fiber(f), f = nullptr;
#endif
    std::vector<bool> is_free(kMaxThreadsPerBlock, false);
    for (int i : w.free_slots) is_free[size_t(i)] = true;
    std::vector<int> busy;
    for (int i = 0; i < int(kMaxThreadsPerBlock); ++i)
      if (!is_free[size_t(i)]) busy.push_back(i);
    retire_worker(w, busy);
  }
}

// ---- the pool ------------------------------------------------------------------------------------
struct Pool {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job*> jobs;  // with blocks left to claim
};

// Under pool.mu: the next block of `job`, or nblocks when none is left; the job leaves the
// queue with its last block.
uint64_t claim(Pool& pl, Job& job) {
  const uint64_t blk = job.next.fetch_add(1);
  if (blk + 1 >= job.nblocks) {
    auto it = std::find(pl.jobs.begin(), pl.jobs.end(), &job);
    if (it != pl.jobs.end()) pl.jobs.erase(it);
  }
  return std::min(blk, job.nblocks);
}

void run_claimed(Job& job, uint64_t blk) {
  tls_job = &job;
  if (!job.faulted.load()) run_block(job, blk);
  tls_job = nullptr;
  // Under the job's mutex: once run_kernel sees the last block finished, no helper touches
  // the job again.
  std::lock_guard<std::mutex> g(job.mu);
  if (job.finished.fetch_add(1) + 1 == job.nblocks) job.cv.notify_all();
}

Pool& pool() {
  static Pool* p = [] {
    auto* pl = new Pool;
    unsigned n = std::thread::hardware_concurrency();
    if (const char* v = std::getenv("RINGTAPE_EMU_THREADS"); v && *v) n = unsigned(std::max(1, std::atoi(v)));
    // The stream worker that runs a launch works on it too: n - 1 helpers.
    for (unsigned i = 1; i < std::max(1u, n); ++i)
      std::thread([pl] {
        for (;;) {
          Job* job = nullptr;
          uint64_t blk = 0;
          {
            std::unique_lock<std::mutex> lk(pl->mu);
            pl->cv.wait(lk, [&] { return !pl->jobs.empty(); });
            job = pl->jobs.front();
            blk = claim(*pl, *job);
          }
          if (blk < job->nblocks) run_claimed(*job, blk);
        }
      }).detach();
    return pl;
  }();
  return *p;
}

}  // namespace

void run_kernel(Op& op) {
  if (op.perf) op.launch_perf = perf_new_launch();
  Job job;
  job.op = &op;
  const KernelLaunch& L = *op.kernel;
  job.nblocks = uint64_t(L.grid.x) * L.grid.y * L.grid.z;
  Pool& pl = pool();
  if (job.nblocks > 1) {
    std::lock_guard<std::mutex> g(pl.mu);
    pl.jobs.push_back(&job);
    pl.cv.notify_all();
  }
  for (;;) {
    uint64_t blk;
    {
      std::lock_guard<std::mutex> g(pl.mu);
      blk = claim(pl, job);
    }
    if (blk >= job.nblocks) break;
    run_claimed(job, blk);
  }
  {
    std::unique_lock<std::mutex> lk(job.mu);
    job.cv.wait(lk, [&] { return job.finished.load() >= job.nblocks; });
  }
  if (job.faulted.load()) throw job.fault;
}

// ---- the built-ins (simt.h) -------------------------------------------------------------------------
namespace {
[[noreturn]] void outside_kernel(const char* what) {
  std::fprintf(stderr, "cuda-emu: %s used outside a kernel (host code cannot call device built-ins)\n", what);
  std::abort();
}
ThreadCtx& self(const char* what) {
  if (!tls_thread) outside_kernel(what);
  return *tls_thread;
}
}  // namespace

uint3 thread_idx() noexcept { return self("threadIdx").idx; }
uint3 block_idx() noexcept { return self("blockIdx").block->idx; }
dim3 block_dim() noexcept { return self("blockDim").block->launch->block; }
dim3 grid_dim() noexcept { return self("gridDim").block->launch->grid; }

void preemption_point(ThreadCtx& th) {
  BlockCtx& b = *th.block;
  if (b.nthreads == 1) return;
  if (env_schedule() == Schedule::random && splitmix(b.preempt_draws) % 4 != 0) return;
  th.state = TState::ready;  // the scheduler resumes it in its turn (Note [Thread order])
  yield(th);
  th.state = TState::running;
}

void sync_block(const std::source_location& where) {
  ThreadCtx& th = self("__syncthreads");
  th.where = where;
  th.barrier = uintptr_t(__builtin_return_address(0));  // Note [Barrier instances]
  th.state = TState::barrier;
  yield(th);
}

unsigned warp_op(WarpOp op, unsigned mask, const void* in, void* out, size_t bytes, int arg, int width,
                 const std::source_location& where) {
  ThreadCtx& th = self("a warp operation");
  BlockCtx& b = *th.block;
  th.where = where;
  if (!((mask >> th.lane) & 1u)) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s at %s: lane %u calls it with mask %#010x, which leaves the lane out",
                  wop_name(op), site(where).c_str(), th.lane, mask);
    thread_fault(cudaErrorIllegalInstruction, buf, nullptr);
  }
  th.wop = op;
  th.wmask = mask;
  th.warg = arg;
  th.wwidth = width;
  th.wbytes = bytes;
  if (bytes) std::memcpy(th.win, in, bytes);
  th.state = TState::warp;
  ++b.warp_waiting;
  if (!try_resolve_warp(b, th)) {
    th.state = TState::faulted;
    yield(th);  // never resumed
  }
  if (th.state == TState::warp) yield(th);
  else th.state = TState::running;  // the last to arrive goes on at once
  if (out && bytes) std::memcpy(out, th.wout, bytes);
  return th.vote;
}

void* shared_static(const void* site_tag, size_t bytes, size_t align) {
  ThreadCtx& th = self("RT_SHARED");
  BlockCtx& b = *th.block;
  for (const auto& [s, off] : b.sites)
    if (s == site_tag) return b.smem + off;
  const size_t off = (b.smem_used + align - 1) / align * align;
  if (off + bytes > kStaticSmemLimit) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "the block's shared memory exceeds %zu bytes: an array of %zu bytes at offset %zu (%zu dynamic bytes first)",
                  kStaticSmemLimit, bytes, off, b.launch->dynamic_smem);
    thread_fault(cudaErrorLaunchOutOfResources, buf, __builtin_return_address(0));
  }
  std::memset(b.smem + off, 0xFF, bytes);
  b.smem_used = off + bytes;
  b.sites.emplace_back(site_tag, off);
  return b.smem + off;
}

void* shared_dynamic() noexcept { return self("RT_SHARED_DYNAMIC").block->smem; }

[[noreturn]] void thread_fault(cudaError_t code, const std::string& what, const void* pc) {
  ThreadCtx& th = *tls_thread;
  std::string report = "cuda-emu: " + what + "\n" + thread_where(th);
  if (pc) {
    const std::string at = symbolize(pc);
    if (!at.empty()) report += "\n  at " + at;
  }
  tls_job->set_fault(code, report);
  th.block->faulted = true;
  th.state = TState::faulted;
  for (;;) yield(th);  // never resumed (Note [Fibers])
}

std::string thread_where(const ThreadCtx& t) { return block_where(*t.block) + ", thread " + dims(t.idx); }

// ---- launches ------------------------------------------------------------------------------------------
std::string emulation_settings() {
  return std::string("RINGTAPE_EMU_SCHEDULE=") + schedule_name(env_schedule()) +
         " RINGTAPE_EMU_SEED=" + std::to_string(env_seed()) +
         " RINGTAPE_EMU_MATH=" + (device_math() == DeviceMath::ulp ? "ulp" : "exact");
}

uint64_t new_launch_id() {
  static std::atomic<uint64_t> launches{0};
  return ++launches;
}

void launch(dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream, const LaunchSite& where,
            KernelEntry entry, std::shared_ptr<const void> args, size_t args_bytes) {
  double flops = 0;  // the hint is this launch's, whether it is queued or not
  bool flops_f64 = false;
  take_launch_flops(&flops, &flops_f64);
  CUstream_st* s = resolve(stream);
  if (!s) {
    set_last_error(cudaErrorInvalidResourceHandle);
    return;
  }
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  const char* bad = nullptr;
  cudaError_t code = cudaErrorInvalidConfiguration;
  if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) bad = "a zero grid or block dimension";
  else if (threads > kMaxThreadsPerBlock) bad = "more than 1024 threads per block";
  else if (block.x > 1024 || block.y > 1024 || block.z > 64) bad = "a block dimension over (1024, 1024, 64)";
  else if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) bad = "a grid dimension over (2^31 - 1, 65535, 65535)";
  else if (dynamic_smem > kStaticSmemLimit) bad = "more than 48 KiB of dynamic shared memory", code = cudaErrorInvalidValue;
  if (bad) {
    std::fprintf(stderr, "cuda-emu: launch of %s at %s:%d: grid %s, block %s, %zu bytes of shared memory: %s\n",
                 where.kernel, where.file, where.line, dims(grid).c_str(), dims(block).c_str(), dynamic_smem, bad);
    set_last_error(code);
    capture_failed(s);  // as any refused work (Note [Stream capture] in cuda_emu/capture.cc)
    return;
  }
  note_launched(where);  // Note [Kernel coverage] in coverage.cc
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kernel;
  op->name = where.kernel;
  op->kernel = std::make_unique<KernelLaunch>();
  KernelLaunch& L = *op->kernel;
  L.site = where;
  L.grid = grid;
  L.block = block;
  L.dynamic_smem = dynamic_smem;
  L.entry = entry;
  L.args = std::move(args);
  L.args_bytes = args_bytes;
  L.id = new_launch_id();
  L.flops = flops;
  L.flops_f64 = flops_f64;
  if (const cudaError_t e = submit(s, std::move(op))) set_last_error(e);
}

}  // namespace rt::emu
