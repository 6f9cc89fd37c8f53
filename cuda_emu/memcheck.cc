// The memory checker: every load and store of a kernel, and every range an operation on a
// stream uses, is checked here.
//
// Note [Instrumented kernels]
// .cu files are compiled with -fsanitize=thread (tools/copts.bzl): GCC then calls
// __tsan_readN / __tsan_writeN before each access (the _range forms for aggregate copies),
// and those are defined below; no sanitizer runtime takes part. Outside kernel code
// (launchers, host code in the same files) tls_thread is null and the call returns at once.
// Inside, the address decides:
//   device memory  the kernel's own device (else: a missing cudaSetDevice, or a tensor on
//                  another device), natural alignment for 2/4/8/16-byte accesses, inside a
//                  block handed out (annotate.h) or cudaMalloc'd, reads of written bytes only
//                  (fresh memory is poisoned and its shadow says so), and the cross-stream
//                  hazard check (Note [Cross-stream hazards] in internal.h);
//   shared memory  inside what the block declared, reads of written bytes only, and
//                  races (Note [Shared-memory races]);
//   its own stack, the launch's parameters, pinned host memory, the program's constants:
//                  allowed; anything else is host memory a kernel cannot reach.
// Under --config=cuda-emu-asan and -tsan the kernels are compiled for that sanitizer's own
// runtime instead, and these checks are off; copies and library calls are still checked
// here (check_uses). Not seen: __builtin_memcpy expanded inline in kernel code (GCC does not
// instrument it), and accesses from code the kernel calls in other, uninstrumented files.
//
// Note [Local arrays]
// A thread's own arrays (local memory on a GPU: `float v[U]` in a kernel) live on its fiber's
// stack here, which the access check allows as a whole, so an index past such an array would
// read or write the thread's other variables unseen. The .cu files are also compiled with
// -fsanitize=bounds (tools/copts.bzl): GCC checks every index into an array whose bound it
// knows (a local or a shared array declared with sizes, a fixed-size array member) and calls
// __ubsan_handle_out_of_bounds on one out of range, defined below: a fault in a kernel, naming
// the array's type, the index and the line; an abort with the same message in host code of
// the same files. Not covered: arrays reached through a pointer (GCC does not know their
// bound), trailing one-element or flexible arrays of a struct (GCC leaves them alone), and
// loops GCC proves in range at compile time (nothing to check).
//
// Note [Shared-memory races]
// Per byte of the arena the last write and the last read(s), with the barrier epoch they
// happened in. Two accesses to a byte by different threads of the block in the same epoch
// (between the same two __syncthreads), at least one a write, race: their order is not
// defined on a GPU. Lanes of one warp are ordered only as Note [Warp order] says. Atomics do
// not race with each other, but an atomic and a plain access of different threads in one
// epoch do (the plain load may see the value before or after the update).
//
// Note [Warp order]
// Since Volta the lanes of a warp do not run in lock-step: two lanes' accesses are ordered only
// by a warp-level synchronisation both took part in (a __syncwarp, shuffle or vote whose mask
// names both) after the first access and before the second, or by a __syncthreads. Each lane
// counts the warp-level operations it took part in (warp_epoch), an access records its lane's
// count, and each lane keeps, per lane of its warp, that lane's count at their last operation
// together (synced_with). Lane B's access is ordered after lane A's recorded at count k when
// B.synced_with[A] > k: they met after A's access, and B is past it. (This replaced a heuristic
// that took any difference between the two lanes' own counts for an order: a lane that had
// passed a __syncwarp of its own before writing looked ordered with a lane that never met it.)
//
// Note [Races between blocks]
// The blocks of one launch are not ordered with each other: two of them accessing the same
// bytes of global memory, at least one writing, race on a GPU whatever order the emulator ran
// them in, unless both accesses are atomics (atomics against plain loads or stores race too).
// Per 4-byte word of device memory (Heap::race) the last write and the last read keep a tag:
// the launch (KernelLaunch::id modulo 2^28: an earlier launch's record matches only 2^28 launches on), the
// block (20 bits), the thread, which bytes of the word, whether atomic, and whether several
// blocks; and the instruction, for the report. An access checks the other kind's record of
// each word it touches (a write both) and merges itself into its own kind's. The check does
// not depend on the order the blocks ran in: whichever comes second sees the first. What it
// does not see: a record is replaced, not merged, when a block touches other bytes of the
// word than the recorded ones (two blocks' halves of one word stay apart that way), so a third
// block's access of the first one's bytes then goes unchecked; two host workers checking the
// same word at the same instant can both miss the other. Threads of one block on global memory
// are not checked against each other (as compute-sanitizer's racecheck, which checks shared
// memory only); a launch of one block, or of more than 2^20, is not checked.
#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "cuda_emu/executor.h"
#include "cuda_emu/perf.h"

namespace rt::emu {
namespace {

constexpr uint16_t kManyReaders = 0xFFFF;

// Whether kernels' writes reach the shadow: not under --config=cuda-emu-asan/-tsan, whose
// sanitizer runtime receives the instrumented accesses instead of on_access.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kKernelWritesMarked = false;
#else
constexpr bool kKernelWritesMarked = true;
#endif

uint8_t shadow_at(const uint8_t* s) { return std::atomic_ref<uint8_t>(*const_cast<uint8_t*>(s)).load(std::memory_order_relaxed); }
void set_shadow(uint8_t* s, uint8_t v) { std::atomic_ref<uint8_t>(*s).store(v, std::memory_order_relaxed); }

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

const char* verb(bool write) { return write ? "write" : "read"; }

std::string thread_name(const BlockCtx& b, uint32_t linear) {
  const dim3 d = b.launch->block;
  return fmt("thread (%u,%u,%u)", linear % d.x, linear / d.x % d.y, linear / (d.x * d.y));
}

// Whether the operation with clock `c` is ordered after the access `packed` (0: none).
inline bool covers(const Clock& c, uint64_t packed) {
  return packed == 0 || c.at(access_uid(packed)) >= access_seq(packed);
}

// Note [Readers per stream]
// A write must be ordered after every read of its bytes since the last write, not only after
// the last one: streams A and B read a buffer, then C, ordered after B's read by an event but
// not after A's, writes it. With one reader kept per granule (the last: B's) that write passed;
// A's kernel may still have been reading. So each granule keeps up to kReaders reads: a stream's
// later read replaces its earlier one (what is ordered after the later is after the earlier),
// as does a read ordered after the one kept (vector clocks are transitive); a write, ordered
// after all of them or reported, empties the list. Only kReaders streams reading one granule
// at once, none ordered after another, overflow it: the newest then replaces the slot of its
// stream's number modulo kReaders, and a hazard with the read dropped can go unseen.
void note_read(std::atomic<uint64_t>* slots, uint64_t me, const Clock& c) {
  int free = -1;
  for (int k = 0; k < kReaders; ++k) {
    const uint64_t r = slots[k].load(std::memory_order_relaxed);
    if (r == me) return;
    if (r != 0 && access_uid(r) == access_uid(me)) {  // this stream's earlier read
      slots[k].store(me, std::memory_order_relaxed);
      return;
    }
    if (free < 0 && covers(c, r)) free = k;  // empty, or a read this one is ordered after
  }
  slots[free >= 0 ? free : int(access_uid(me) % kReaders)].store(me, std::memory_order_relaxed);
}

// The hazard check of one access (or range) against the operation's clock.
// Returns "" when ordered, else what it conflicts with.
std::string hazard(const Op& op, uintptr_t a, size_t n, bool write, bool mark_access) {
  const Heap& h = *g_heap;
  const uint64_t me = pack_access(op.stream_uid, op.seq);
  const size_t g0 = (a - h.base) >> kGranuleShift, g1 = (a + n - 1 - h.base) >> kGranuleShift;
  for (size_t g = g0; g <= g1; ++g) {
    const uint64_t w = h.writer[g].load(std::memory_order_relaxed);
    if (w && w != me && !covers(op.clock, w)) return fmt("last written by %s", op_name(w).c_str());
    std::atomic<uint64_t>* slots = h.reader + g * kReaders;
    if (write) {
      for (int k = 0; k < kReaders; ++k) {
        const uint64_t r = slots[k].load(std::memory_order_relaxed);
        if (r != me && !covers(op.clock, r))
          return fmt("last read by %s, which may still be reading it", op_name(r).c_str());
      }
      if (!mark_access) continue;
      if (w != me) h.writer[g].store(me, std::memory_order_relaxed);
      for (int k = 0; k < kReaders; ++k)
        if (slots[k].load(std::memory_order_relaxed) != 0) slots[k].store(0, std::memory_order_relaxed);
    } else if (mark_access) {
      note_read(slots, me, op.clock);
    }
  }
  return "";
}

std::string hazard_text(const char* who, bool write, size_t n, uintptr_t a, const std::string& conflict, const Op& op) {
  return fmt("cross-stream hazard: %s %ss %zu bytes at %#" PRIxPTR " (%s) on %s, %s, with no event or synchronisation "
             "ordering the two (a missing cudaStreamWaitEvent or record_stream?)",
             who, verb(write), n, a, describe_device_address(a).c_str(), stream_name(op.stream_uid).c_str(),
             conflict.c_str());
}

[[noreturn]] void fault(cudaError_t code, const std::string& what, const void* pc) { thread_fault(code, what, pc); }

void check_global(ThreadCtx& t, uintptr_t a, size_t n, bool write, bool atomic, const void* pc) {
  const Heap& h = *g_heap;
  const BlockCtx& b = *t.block;
  const int dev = h.device_of(a);
  if (dev != b.device)
    fault(cudaErrorIllegalAddress,
          fmt("%s of %zu bytes at %#" PRIxPTR ": memory of cuda:%d, but the kernel runs on cuda:%d (a missing "
              "cudaSetDevice, or an operand on another device)",
              verb(write), n, a, dev, b.device),
          pc);
  if ((n & (n - 1)) == 0 && (a & (n - 1)))
    fault(cudaErrorMisalignedAddress, fmt("misaligned %zu-byte %s at %#" PRIxPTR " (%s)", n, verb(write), a,
                                          describe_device_address(a).c_str()),
          pc);
  uint8_t* s = h.shadow + (a - h.base);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t st = shadow_at(s + i);
    if (st == kInit) continue;
    if (st == kNoAccess || st == kFreed)
      fault(cudaErrorIllegalAddress,
            fmt("%s %s of %zu bytes at %#" PRIxPTR ": %s", st == kFreed ? "use of freed memory:" : "out-of-bounds", verb(write),
                n, a, describe_device_address(a + i).c_str()),
            pc);
    if (!write || atomic)
      fault(cudaErrorLaunchFailure,
            fmt("read of never-written device memory: %zu bytes at %#" PRIxPTR " (%s)", n, a,
                describe_device_address(a + i).c_str()),
            pc);
    set_shadow(s + i, kInit);
  }
  const std::string conflict = hazard(*b.op, a, n, write, true);
  if (!conflict.empty()) fault(cudaErrorLaunchFailure, hazard_text("the kernel", write, n, a, conflict, *b.op), pc);
}

void check_shared(ThreadCtx& t, uintptr_t a, size_t n, bool write, bool atomic, const void* pc) {
  BlockCtx& b = *t.block;
  const size_t off = a - uintptr_t(b.smem);
  if (off + n > b.smem_used)
    fault(cudaErrorIllegalAddress,
          fmt("out-of-bounds shared-memory %s of %zu bytes at offset %zu: the block has %zu bytes of shared memory",
              verb(write), n, off, b.smem_used),
          pc);
  if ((n & (n - 1)) == 0 && (a & (n - 1)))
    fault(cudaErrorMisalignedAddress, fmt("misaligned %zu-byte shared-memory %s at offset %zu", n, verb(write), off), pc);
  const uint16_t me = uint16_t(t.linear);
  auto ordered = [&](uint16_t tid, uint32_t wep) {
    return tid == me || (tid != kManyReaders && tid / 32 == t.warp && t.synced_with[tid % 32] > wep);
  };
  // `other` accessed it (`did`) at `other_pc` since the last barrier.
  auto race = [&](const char* kind, uint16_t other, const char* did, const void* other_pc) {
    const std::string at = other_pc && other != kManyReaders ? symbolize(other_pc) : "";
    fault(cudaErrorLaunchFailure,
          fmt("shared-memory race (%s): %s %ss offset %zu (%zu bytes)%s, which %s %s since the last __syncthreads%s%s "
              "(%s)",
              kind, thread_name(b, t.linear).c_str(), verb(write), off, n, atomic ? " atomically" : "",
              other == kManyReaders ? "several threads" : thread_name(b, other).c_str(), did,
              at.empty() ? "" : " at ", at.c_str(),
              std::strstr(kind, "atomic") ? "an atomic and a plain access race: make both atomic, or separate them "
                                            "with __syncthreads"
                                          : "a missing __syncthreads?"),
          pc);
  };
  // A cell's record of one kind of access (epoch, thread, warp epoch, instruction) made this thread's.
  auto mine = [&](uint32_t& epoch, uint16_t& tid, uint32_t& wep, const void*& at) {
    epoch = b.epoch;
    tid = me;
    wep = t.warp_epoch;
    at = pc;
  };
  // Reads and atomics of several threads in one epoch do not race each other: the record keeps one
  // thread, or "several threads" (kManyReaders) once a second one came in the same epoch.
  auto note = [&](uint32_t& epoch, uint16_t& tid, uint32_t& wep, const void*& at) {
    if (epoch == b.epoch && tid != me)
      tid = kManyReaders;
    else
      mine(epoch, tid, wep, at);
  };
  for (size_t i = off; i < off + n; ++i) {
    SmemCell& c = b.smem_shadow[i];
    if (c.gen != b.gen) {
      if (!write || atomic)
        fault(cudaErrorLaunchFailure, fmt("read of never-written shared memory: offset %zu (%zu bytes)", off, n), pc);
      c = SmemCell{};
      c.gen = b.gen;
    }
    if (atomic) {  // races plain accesses of other threads, not other atomics
      if (c.w_epoch == b.epoch && !ordered(c.w_tid, c.w_wep)) race("atomic after plain write", c.w_tid, "wrote", c.w_pc);
      if (c.r_epoch == b.epoch && !ordered(c.r_tid, c.r_wep)) race("atomic after plain read", c.r_tid, "read", c.r_pc);
      note(c.a_epoch, c.a_tid, c.a_wep, c.a_pc);
      continue;
    }
    if (c.a_epoch == b.epoch && !ordered(c.a_tid, c.a_wep))
      race(write ? "plain write after atomic" : "plain read after atomic", c.a_tid, "updated atomically", c.a_pc);
    if (write) {
      if (c.w_epoch == b.epoch && !ordered(c.w_tid, c.w_wep)) race("write after write", c.w_tid, "wrote", c.w_pc);
      if (c.r_epoch == b.epoch && !ordered(c.r_tid, c.r_wep)) race("write after read", c.r_tid, "read", c.r_pc);
      mine(c.w_epoch, c.w_tid, c.w_wep, c.w_pc);
    } else {
      if (c.w_epoch == 0) fault(cudaErrorLaunchFailure, fmt("read of never-written shared memory: offset %zu (%zu bytes)", off, n), pc);
      if (c.w_epoch == b.epoch && !ordered(c.w_tid, c.w_wep)) race("read after write", c.w_tid, "wrote", c.w_pc);
      note(c.r_epoch, c.r_tid, c.r_wep, c.r_pc);
    }
  }
}

// ---- races between blocks (Note [Races between blocks]) -------------------------------------------
// A record's tag: launch (bits 0-27), block (28-47), thread (48-57), bytes of the word (58-61),
// atomic (62), several blocks (63).
constexpr int kTagBlock = 28, kTagThread = 48, kTagBytes = 58;
constexpr uint64_t kTagLaunch = (uint64_t(1) << kTagBlock) - 1;
constexpr uint64_t kTagWho = (uint64_t(1) << kTagThread) - 1;  // launch and block
constexpr uint64_t kTagAtomic = uint64_t(1) << 62, kTagMany = uint64_t(1) << 63;

inline uint64_t tag_bytes(uint64_t tag) { return (tag >> kTagBytes) & 15; }

// Whether the record `tag` conflicts with an access of block `self` to `bytes` of its word:
// this launch, a byte in common, another block (or several), not atomics on both sides.
inline bool conflicts(uint64_t tag, uint64_t self, uint64_t bytes, bool atomic) {
  if ((tag & kTagLaunch) != (self & kTagLaunch) || !(tag_bytes(tag) & bytes)) return false;
  if ((tag & kTagWho) == self && !(tag & kTagMany)) return false;
  return !(atomic && (tag & kTagAtomic));
}

// The record after an access tagged `mine`: its own where the record is of another launch or
// of other bytes, else the two merged (the first's block, thread and instruction kept).
inline uint64_t merged(uint64_t tag, uint64_t mine) {
  if ((tag & kTagLaunch) != (mine & kTagLaunch) || !(tag_bytes(tag) & tag_bytes(mine))) return mine;
  uint64_t m = tag | (mine & (uint64_t(15) << kTagBytes));
  if ((tag & kTagWho) != (mine & kTagWho)) m |= kTagMany;
  if (!(mine & kTagAtomic)) m &= ~kTagAtomic;  // a plain access makes the record plain
  return m;
}

[[noreturn]] void block_race(const ThreadCtx& t, bool write, bool atomic, uintptr_t a, size_t n, bool other_write,
                             uint64_t other, uint64_t other_pc, const void* pc) {
  const KernelLaunch& L = *t.block->launch;
  const bool other_atomic = other & kTagAtomic;
  const char* kind = atomic != other_atomic ? "plain and atomic"
                     : write && other_write ? "write after write"
                     : write                ? "write after read"
                                            : "read after write";
  const uint64_t blk = (other & kTagWho) >> kTagBlock;
  const uint32_t th = uint32_t(other >> kTagThread) & 1023;
  const dim3 g = L.grid, d = L.block;
  std::string them = fmt("block (%u,%u,%u) thread (%u,%u,%u)%s", uint32_t(blk % g.x), uint32_t(blk / g.x % g.y),
                         uint32_t(blk / (uint64_t(g.x) * g.y)), th % d.x, th / d.x % d.y, th / (d.x * d.y),
                         other & kTagMany ? " (and other blocks)" : "");
  const std::string at = other_pc ? symbolize(reinterpret_cast<const void*>(other_pc)) : "";
  fault(cudaErrorLaunchFailure,
        fmt("race between blocks (%s): %s %s of %zu bytes at %#" PRIxPTR " (%s), which %s %s in this launch%s%s; the "
            "blocks of a launch are not ordered (atomics on both sides, or a second launch)",
            kind, atomic ? "an atomic" : "a plain", write ? "write" : "read", n, a, describe_device_address(a).c_str(),
            them.c_str(), other_atomic ? "updated atomically" : other_write ? "wrote" : "read",
            at.empty() ? "" : " at ", at.c_str()),
        pc);
}

void check_blocks(const ThreadCtx& t, uintptr_t a, size_t n, bool write, bool atomic, const void* pc) {
  const Heap& h = *g_heap;
  const uint64_t self = t.block->race_self;
  const uintptr_t off = a - h.base;
  for (uintptr_t w = off >> 2; w <= (off + n - 1) >> 2; ++w) {
    const uintptr_t lo = std::max<uintptr_t>(off, w << 2), hi = std::min<uintptr_t>(off + n, (w << 2) + 4);
    const uint64_t bytes = ((uint64_t(1) << (hi - lo)) - 1) << (lo & 3);
    const uint64_t mine = self | uint64_t(t.linear) << kTagThread | bytes << kTagBytes | (atomic ? kTagAtomic : 0);
    RaceCell& c = h.race[w];
    uint64_t wt = c.w.tag.load(std::memory_order_relaxed);
    if (conflicts(wt, self, bytes, atomic))
      block_race(t, write, atomic, a, n, true, wt, c.w.pc.load(std::memory_order_relaxed), pc);
    if (write)
      if (const uint64_t rt = c.r.tag.load(std::memory_order_relaxed); conflicts(rt, self, bytes, false))
        block_race(t, write, atomic, a, n, false, rt, c.r.pc.load(std::memory_order_relaxed), pc);
    RaceRecord& own = write ? c.w : c.r;
    uint64_t cur = write ? wt : own.tag.load(std::memory_order_relaxed);
    for (uint64_t next; (next = merged(cur, mine)) != cur;) {
      if (own.tag.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
        if (next == mine) own.pc.store(uintptr_t(pc), std::memory_order_relaxed);
        break;
      }
      if (write && conflicts(cur, self, bytes, atomic))  // another block's write came in between
        block_race(t, write, atomic, a, n, true, cur, own.pc.load(std::memory_order_relaxed), pc);
    }
  }
}

// The common case of a kernel's access, decided without a call: device memory of the
// kernel's own device, naturally aligned, every byte already written, and the granule last
// written by this very launch or by work ordered before it, and (for a read) already read
// by it. Everything else goes the long way (check_global), which also records.
inline bool fast_ok(const BlockCtx& b, uintptr_t a, size_t n, bool write) {
  const Heap& h = *g_heap;
  const uintptr_t off = a - h.base;
  if (off >= h.total || int(off >> h.span_shift) != b.device || (a & (n - 1)) || n > 16) return false;
  uint8_t* s = h.shadow + off;
  // Plain loads of the n shadow bytes, n a power of two up to 16 so that each branch's size
  // is known to the compiler (races are with other blocks' identical stores). Written
  // bytes are kInit = 2; a write may also turn never-written ones (kUninit = 1) into
  // written ones; any other state (no access, freed: 0, 3) goes the long way.
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  auto ok = [write](uint64_t v, uint64_t ones) {
    return v == 2 * ones || (write && !(v & ~(3 * ones)) && ((v ^ (v >> 1)) & ones) == ones);
  };
  switch (n) {
    case 1:
      if (!ok(*s, 1)) return false;
      *s = kInit;
      break;
    case 2:
      if (!ok(*reinterpret_cast<const uint16_t*>(s), 0x0101)) return false;
      *reinterpret_cast<uint16_t*>(s) = 0x0202;
      break;
    case 4:
      if (!ok(*reinterpret_cast<const uint32_t*>(s), 0x01010101)) return false;
      *reinterpret_cast<uint32_t*>(s) = 0x02020202;
      break;
    case 8:
      if (!ok(*reinterpret_cast<const uint64_t*>(s), kOnes)) return false;
      *reinterpret_cast<uint64_t*>(s) = 2 * kOnes;
      break;
    default: {
      auto* q = reinterpret_cast<uint64_t*>(s);
      if (!ok(q[0], kOnes) || !ok(q[1], kOnes)) return false;
      q[0] = q[1] = 2 * kOnes;
    }
  }
  const size_t g = off >> kGranuleShift;  // aligned n <= 16 never crosses a granule
  const uint64_t w = h.writer[g].load(std::memory_order_relaxed);
  const std::atomic<uint64_t>* slots = h.reader + g * kReaders;  // Note [Readers per stream]
  if (write) {
    if (w != b.me) return false;
    for (int k = 0; k < kReaders; ++k)
      if (const uint64_t r = slots[k].load(std::memory_order_relaxed); r != 0 && r != b.me && !covers(*b.clock, r))
        return false;
    return true;
  }
  bool read_before = false;
  for (int k = 0; k < kReaders; ++k) read_before |= slots[k].load(std::memory_order_relaxed) == b.me;
  return read_before && (w == 0 || w == b.me || covers(*b.clock, w));
}

void on_access(ThreadCtx& t, uintptr_t a, size_t n, bool write, bool atomic, const void* pc) {
  // Note [Thread order] in executor.cc: another thread may go first (not at the thread's own stack).
  if (preempts_at_accesses()) [[unlikely]]
    if (g_heap->contains(a) || a - uintptr_t(t.block->smem) < kStaticSmemLimit) preemption_point(t);
  if (t.block->perf) [[unlikely]] perf_access(t, a, n, write, atomic, pc);  // Note [Kernel lab] in perf.cc
  if (!atomic && fast_ok(*t.block, a, n, write)) {
    if (t.block->race_self) check_blocks(t, a, n, write, atomic, pc);
    return;
  }
  if (g_heap->contains(a)) {
    check_global(t, a, n, write, atomic, pc);
    if (t.block->race_self) check_blocks(t, a, n, write, atomic, pc);
    return;
  }
  if (a - uintptr_t(t.block->smem) < kStaticSmemLimit) return check_shared(t, a, n, write, atomic, pc);
  if (a - t.stack_lo < t.stack_hi - t.stack_lo) return;
  const KernelLaunch& L = *t.block->launch;
  const auto args = reinterpret_cast<uintptr_t>(L.args.get());
  if (a - args < L.args_bytes) {
    if (write) fault(cudaErrorIllegalAddress, "write to the launch's parameters", pc);
    return;
  }
  if (is_pinned(reinterpret_cast<const void*>(a), n)) return;
  if (in_program_image(a, n, write)) return;
  fault(cudaErrorIllegalAddress,
        fmt("%s of %zu bytes at %#" PRIxPTR ": host memory, which a kernel cannot reach (a host pointer passed to the "
            "kernel, or a pointer to another thread's local?)",
            verb(write), n, a),
        pc);
}

}  // namespace

uint64_t race_tag(uint64_t launch_id, uint64_t linear_block, uint64_t nblocks) {
  if (!g_heap || !g_heap->race || nblocks < 2 || nblocks > (uint64_t(1) << (kTagThread - kTagBlock))) return 0;
  return (launch_id % kTagLaunch + 1) | linear_block << kTagBlock;  // never 0
}

// ---- operations' declared uses (copies, memsets, library calls) -------------------------------------
void check_uses(const Op& op) {
  const Heap& h = heap();
  // A copy between two devices is a peer copy: each side on its own device.
  bool peer = false;
  if (op.kind == Op::Kind::copy && op.uses.size() == 2)
    peer = h.device_of(uintptr_t(op.uses[0].ptr)) != h.device_of(uintptr_t(op.uses[1].ptr));
  for (const MemUse& u : op.uses) {
    if (u.bytes == 0) continue;
    const auto a = reinterpret_cast<uintptr_t>(u.ptr);
    const bool write = u.access != MemUse::read;
    const char* what = u.access == MemUse::read ? "reads" : u.access == MemUse::write ? "writes" : "reads and writes";
    if (!h.contains(a))
      fail(cudaErrorIllegalAddress, fmt("'%s' %s %zu bytes at %p, which is not device memory", op.name.c_str(), what,
                                        u.bytes, u.ptr));
    const int dev = h.device_of(a);
    if (!peer && dev != op.device)
      fail(cudaErrorIllegalAddress,
           fmt("'%s' on cuda:%d %s %zu bytes of cuda:%d memory at %p (a missing cudaSetDevice, or an operand on "
               "another device)",
               op.name.c_str(), op.device, what, u.bytes, dev, u.ptr));
    if (!h.contains(a + u.bytes - 1) || h.device_of(a + u.bytes - 1) != dev)
      fail(cudaErrorIllegalAddress, fmt("'%s' %s %zu bytes at %p: past the end of cuda:%d's memory", op.name.c_str(),
                                        what, u.bytes, u.ptr, dev));
    const uint8_t* s = h.shadow + (a - h.base);
    for (uint8_t bad : {uint8_t(kNoAccess), uint8_t(kFreed)})
      if (const void* q = std::memchr(s, bad, u.bytes)) {
        const size_t i = size_t(static_cast<const uint8_t*>(q) - s);
        fail(cudaErrorIllegalAddress,
             fmt("'%s' %s %zu bytes at %p: byte %zu is %s (%s)", op.name.c_str(), what, u.bytes, u.ptr, i,
                 bad == kFreed ? "freed" : "out of bounds", describe_device_address(a + i).c_str()));
      }
    // Copies move whatever is there (the shadow goes with it, mark_uses); others must not
    // read what was never written. Not under a sanitizer: its runtime takes the kernels'
    // accesses (Note [Instrumented kernels]), so their writes never reach the shadow.
    if (kKernelWritesMarked && op.kind != Op::Kind::copy && u.access != MemUse::write)
      if (const void* q = std::memchr(s, kUninit, u.bytes)) {
        const size_t i = size_t(static_cast<const uint8_t*>(q) - s);
        fail(cudaErrorLaunchFailure, fmt("'%s' reads never-written device memory: byte %zu of the %zu bytes at %p (%s)",
                                         op.name.c_str(), i, u.bytes, u.ptr, describe_device_address(a + i).c_str()));
      }
    const std::string conflict = hazard(op, a, u.bytes, write, false);
    if (!conflict.empty()) fail(cudaErrorLaunchFailure, hazard_text(("'" + op.name + "'").c_str(), write, u.bytes, a, conflict, op));
  }
}

void mark_uses(const Op& op) {
  const Heap& h = heap();
  const MemUse* src = nullptr;
  for (const MemUse& u : op.uses) {
    if (u.bytes == 0 || !h.contains(uintptr_t(u.ptr))) continue;
    const auto a = reinterpret_cast<uintptr_t>(u.ptr);
    if (u.access == MemUse::read) {
      src = &u;
    } else if (op.writes_discarded) {
      // Its old bytes stay (discard_writes).
    } else if (op.kind == Op::Kind::copy && src) {
      std::memmove(h.shadow + (a - h.base), h.shadow + (uintptr_t(src->ptr) - h.base), u.bytes);
    } else {
      mark(u.ptr, u.bytes, kInit);
    }
    hazard(op, a, u.bytes, u.access != MemUse::read, true);
  }
}

// ---- atomics (simt.h) ---------------------------------------------------------------------------------
namespace {
template <typename I, typename F>
I apply_op(AtomicOp op, I cur_bits, const void* operand, const void* compare, bool is_float, bool is_signed) {
  using S = std::make_signed_t<I>;
  auto as = [](auto v, const void* p) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  auto bits = [](auto v) {
    I r;
    std::memcpy(&r, &v, sizeof r);
    return r;
  };
  if (is_float) {
    const F cur = as(F{}, &cur_bits), v = as(F{}, operand);
    switch (op) {
      case AtomicOp::add: return bits(F(cur + v));
      case AtomicOp::sub: return bits(F(cur - v));
      case AtomicOp::min: return bits(v < cur ? v : cur);
      case AtomicOp::max: return bits(v > cur ? v : cur);
      case AtomicOp::exch: return bits(v);
      case AtomicOp::cas: return cur_bits == as(I{}, compare) ? as(I{}, operand) : cur_bits;
      default: return cur_bits;
    }
  }
  const I v = as(I{}, operand);
  switch (op) {
    case AtomicOp::add: return I(cur_bits + v);
    case AtomicOp::sub: return I(cur_bits - v);
    case AtomicOp::min: return is_signed ? I(std::min(S(cur_bits), S(v))) : std::min(cur_bits, v);
    case AtomicOp::max: return is_signed ? I(std::max(S(cur_bits), S(v))) : std::max(cur_bits, v);
    case AtomicOp::exch: return v;
    case AtomicOp::cas: return cur_bits == as(I{}, compare) ? v : cur_bits;
    case AtomicOp::bit_and: return I(cur_bits & v);
    case AtomicOp::bit_or: return I(cur_bits | v);
    case AtomicOp::bit_xor: return I(cur_bits ^ v);
    case AtomicOp::inc: return cur_bits >= v ? I(0) : I(cur_bits + 1);
    case AtomicOp::dec: return (cur_bits == 0 || cur_bits > v) ? v : I(cur_bits - 1);
  }
  return cur_bits;
}

template <typename I, typename F>
void atomic_bits(AtomicOp op, void* p, bool is_float, bool is_signed, const void* operand, const void* compare, void* old) {
  std::atomic_ref<I> ref(*static_cast<I*>(p));
  I cur = ref.load();
  while (!ref.compare_exchange_weak(cur, apply_op<I, F>(op, cur, operand, compare, is_float, is_signed))) {
  }
  std::memcpy(old, &cur, sizeof(I));
}
}  // namespace

void atomic_rmw(AtomicOp op, void* p, size_t bytes, bool is_float, bool is_signed, const void* operand,
                const void* compare, void* old) {
  // Under a sanitizer the access below is its to check (and kernels' writes never reached the
  // shadow, so an initialisation check here would be wrong).
  if (kKernelWritesMarked)
    if (ThreadCtx* t = tls_thread) on_access(*t, uintptr_t(p), bytes, true, true, __builtin_return_address(0));
  if (bytes == 4) atomic_bits<uint32_t, float>(op, p, is_float, is_signed, operand, compare, old);
  else atomic_bits<uint64_t, double>(op, p, is_float, is_signed, operand, compare, old);
}

}  // namespace rt::emu

// ---- the instrumentation's calls (Note [Instrumented kernels]) -----------------------------------
// Under --config=cuda-emu-tsan (and -asan) the sanitizer's runtime defines these names.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
namespace rt::emu {
void on_access_hook(uintptr_t a, size_t n, bool write, const void* pc) { on_access(*tls_thread, a, n, write, false, pc); }
}  // namespace rt::emu

using rt::emu::tls_thread;
#define RT_EMU_ACCESS(n)                                                                                          \
  extern "C" void __tsan_read##n(void* a) {                                                                      \
    if (tls_thread) rt::emu::on_access_hook(uintptr_t(a), n, false, __builtin_return_address(0));               \
  }                                                                                                               \
  extern "C" void __tsan_write##n(void* a) {                                                                     \
    if (tls_thread) rt::emu::on_access_hook(uintptr_t(a), n, true, __builtin_return_address(0));                \
  }                                                                                                               \
  extern "C" void __tsan_unaligned_read##n(void* a) {                                                            \
    if (tls_thread) rt::emu::on_access_hook(uintptr_t(a), n, false, __builtin_return_address(0));               \
  }                                                                                                               \
  extern "C" void __tsan_unaligned_write##n(void* a) {                                                           \
    if (tls_thread) rt::emu::on_access_hook(uintptr_t(a), n, true, __builtin_return_address(0));                \
  }
RT_EMU_ACCESS(1)
RT_EMU_ACCESS(2)
RT_EMU_ACCESS(4)
RT_EMU_ACCESS(8)
RT_EMU_ACCESS(16)
extern "C" void __tsan_read_range(void* a, unsigned long n) {
  if (tls_thread && n) rt::emu::on_access_hook(uintptr_t(a), n, false, __builtin_return_address(0));
}
extern "C" void __tsan_write_range(void* a, unsigned long n) {
  if (tls_thread && n) rt::emu::on_access_hook(uintptr_t(a), n, true, __builtin_return_address(0));
}
extern "C" void __tsan_init() {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit() {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}

// Host code in the same files (plan caches, flags) uses std::atomic: the instrumented
// atomics must still be atomic. Kernel code's atomics go through simt.h instead.
#define RT_EMU_ATOMICS(bits, T)                                                                                   \
  extern "C" T __tsan_atomic##bits##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
  extern "C" void __tsan_atomic##bits##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
  extern "C" T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) {                                          \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                           \
  }                                                                                                               \
  extern "C" T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) {                                         \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                            \
  }                                                                                                               \
  extern "C" T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) {                                         \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                            \
  }                                                                                                               \
  extern "C" T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) {                                         \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                            \
  }                                                                                                               \
  extern "C" T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) {                                          \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                             \
  }                                                                                                               \
  extern "C" T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) {                                         \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                            \
  }                                                                                                               \
  extern "C" T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int) {                                        \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                           \
  }                                                                                                               \
  extern "C" int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {              \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                       \
  }                                                                                                               \
  extern "C" int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                        \
  }                                                                                                               \
  extern "C" T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                    \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                             \
    return c;                                                                                                     \
  }
RT_EMU_ATOMICS(8, char)
RT_EMU_ATOMICS(16, short)
RT_EMU_ATOMICS(32, int)
RT_EMU_ATOMICS(64, long)
extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// ---- fixed-size arrays indexed out of range (Note [Local arrays]) --------------------------------
// The layouts GCC's -fsanitize=bounds passes (those of its UBSan runtime's interface).
namespace {
struct UbsanLocation {
  const char* file;
  uint32_t line, column;
};
struct UbsanType {
  uint16_t kind;  // 0: integer
  uint16_t info;  // integers: bit 0 signed, width 1 << (info >> 1) bits
  char name[1];
};
struct UbsanOutOfBounds {
  UbsanLocation loc;
  const UbsanType* array;
  const UbsanType* index;
};

std::string index_value(const UbsanType* t, uintptr_t v) {
  const unsigned bits = 1u << (t->info >> 1);
  if (t->kind != 0 || bits > 64) return "?";
  if (t->info & 1) return std::to_string(bits == 64 ? int64_t(v) : int64_t(v << (64 - bits)) >> (64 - bits));
  return std::to_string(bits == 64 ? uint64_t(v) : uint64_t(v) & ((uint64_t(1) << bits) - 1));
}

void out_of_bounds(void* data, void* index, const void* pc) {
  const auto* d = static_cast<const UbsanOutOfBounds*>(data);
  const std::string what = "out-of-bounds index " + index_value(d->index, uintptr_t(index)) + " of an array of type " +
                           d->array->name + " at " + d->loc.file + ":" + std::to_string(d->loc.line) +
                           " (Note [Local arrays] in cuda_emu/memcheck.cc)";
  if (tls_thread) rt::emu::fault(cudaErrorIllegalAddress, what, pc);
  std::fprintf(stderr, "cuda-emu: %s, in host code\n", what.c_str());
  std::abort();
}
}  // namespace

extern "C" void __ubsan_handle_out_of_bounds(void* data, void* index) {
  out_of_bounds(data, index, __builtin_return_address(0));
}
extern "C" void __ubsan_handle_out_of_bounds_abort(void* data, void* index) {
  out_of_bounds(data, index, __builtin_return_address(0));
}
#endif
