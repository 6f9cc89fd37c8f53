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
// Note [Shared-memory races]
// Per byte of the arena the last write and the last read(s), with the barrier epoch they
// happened in. Two accesses to a byte by different threads of the block in the same epoch
// (between the same two __syncthreads), at least one a write, race: their order is not
// defined on a GPU. Lanes of one warp are ordered only as Note [Warp order] says. Atomics do
// not race with each other and are not recorded.
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
  auto ordered = [&](uint16_t tid, uint16_t wep) {
    return tid == me || (tid != kManyReaders && tid / 32 == t.warp && t.synced_with[tid % 32] > wep);
  };
  auto race = [&](const char* kind, uint16_t other) {
    fault(cudaErrorLaunchFailure,
          fmt("shared-memory race (%s): %s %ss offset %zu (%zu bytes), which %s accessed since the last "
              "__syncthreads (a missing __syncthreads?)",
              kind, thread_name(b, t.linear).c_str(), verb(write), off, n,
              other == kManyReaders ? "several threads" : thread_name(b, other).c_str()),
          pc);
  };
  for (size_t i = off; i < off + n; ++i) {
    SmemCell& c = b.smem_shadow[i];
    if (c.gen != b.gen) {
      if (!write || atomic)
        fault(cudaErrorLaunchFailure, fmt("read of never-written shared memory: offset %zu (%zu bytes)", off, n), pc);
      c = SmemCell{b.gen, 0, 0, 0, 0, 0, 0};
    }
    if (atomic) continue;
    if (write) {
      if (c.w_epoch == b.epoch && !ordered(c.w_tid, c.w_wep)) race("write after write", c.w_tid);
      if (c.r_epoch == b.epoch && !ordered(c.r_tid, c.r_wep)) race("write after read", c.r_tid);
      c.w_epoch = b.epoch;
      c.w_tid = me;
      c.w_wep = t.warp_epoch;
    } else {
      if (c.w_epoch == 0) fault(cudaErrorLaunchFailure, fmt("read of never-written shared memory: offset %zu (%zu bytes)", off, n), pc);
      if (c.w_epoch == b.epoch && !ordered(c.w_tid, c.w_wep)) race("read after write", c.w_tid);
      if (c.r_epoch == b.epoch && c.r_tid != me) {
        c.r_tid = kManyReaders;
      } else {
        c.r_epoch = b.epoch;
        c.r_tid = me;
        c.r_wep = t.warp_epoch;
      }
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
  if (!atomic && fast_ok(*t.block, a, n, write)) return;
  if (g_heap->contains(a)) return check_global(t, a, n, write, atomic, pc);
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
#endif
