// The state of a running block and of its GPU threads, shared by the executor (which runs
// them as fibers) and the memory checker (which needs, at every access, whose access it is).
#pragma once

#include <boost/context/detail/fcontext.hpp>

#include <source_location>
#include <vector>

#include "cuda_emu/internal.h"

namespace rt::emu {

constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr size_t kStaticSmemLimit = 48 * 1024;  // per block (the opt-in to more is not emulated)

enum class TState : uint8_t { fresh, ready, running, barrier, warp, done, faulted };

struct BlockCtx;
struct ThreadCtx;

// A fiber that runs GPU threads of a block one after the other (Note [Fibers] in
// executor.cc); it belongs to one of them from the moment that thread waits.
struct Runner {
  int slot = -1;  // its stack
  uintptr_t stack_lo = 0, stack_hi = 0;
  BlockCtx* block = nullptr;
  ThreadCtx* current = nullptr;                        // the GPU thread on it
  boost::context::detail::fcontext_t ctx = nullptr;    // the fiber, while suspended
  boost::context::detail::fcontext_t sched = nullptr;  // the scheduler, while it runs
  bool done = false;                                   // no thread left to start
  const void* sched_stack = nullptr;                   // AddressSanitizer: the scheduler's stack
  size_t sched_stack_size = 0;
};

struct ThreadCtx {
  uint3 idx{};
  uint32_t linear = 0, lane = 0, warp = 0;
  BlockCtx* block = nullptr;
  TState state = TState::fresh;
  Runner* runner = nullptr;  // the fiber it runs on, once started
  uintptr_t stack_lo = 0, stack_hi = 0;
  std::source_location where;  // the barrier or warp operation it waits at
  // The pending warp operation (Note [Warp operations] in executor.cc).
  WarpOp wop = WarpOp::sync;
  unsigned wmask = 0, vote = 0;
  int warg = 0, wwidth = 32;
  size_t wbytes = 0;
  alignas(16) unsigned char win[16] = {}, wout[16] = {};
  // Note [Warp order] in memcheck.cc: the warp-level synchronisations this lane took part in,
  // and for each lane of its warp that lane's count at the last one they took part in together.
  uint32_t warp_epoch = 0;
  uint32_t synced_with[32] = {};
  uintptr_t barrier = 0;    // the barrier instruction it waits at (Note [Barrier instances] in executor.cc)
};

// Per byte of the shared arena (memcheck.cc, Note [Shared-memory races]).
struct SmemCell {
  uint32_t gen = 0;           // the block it belongs to; another value: never written in this block
  uint32_t w_epoch = 0;       // barrier epoch of the last write (0: none)
  uint32_t r_epoch = 0;       // ... of the last read
  uint32_t a_epoch = 0;       // ... of the last atomic
  uint16_t w_tid = 0, r_tid = 0, a_tid = 0;  // who (r_tid, a_tid 0xFFFF: several threads in that epoch)
  uint32_t w_wep = 0, r_wep = 0, a_wep = 0;  // the thread's warp_epoch at the access (Note [Warp order])
  const void* w_pc = nullptr;  // the accesses' instructions, for reports
  const void* r_pc = nullptr;
  const void* a_pc = nullptr;
};

struct BlockPerf;

struct BlockCtx {
  const Op* op = nullptr;
  const KernelLaunch* launch = nullptr;
  int device = 0;              // op's, and for the access checks' fast path:
  uint64_t me = 0;             // pack_access(op's stream, op's seq)
  uint64_t race_self = 0;      // race_tag(launch, block): Note [Races between blocks] in memcheck.cc; 0: unchecked
  const Clock* clock = nullptr;  // op's
  uint3 idx{};
  uint32_t nthreads = 0;
  uint32_t epoch = 1;  // barrier epochs passed + 1
  uint32_t gen = 0;    // unique per block run on this worker
  std::vector<ThreadCtx>* threads = nullptr;
  const std::vector<uint32_t>* order = nullptr;  // Note [Thread order]
  uint32_t next_fresh = 0;                       // threads started so far, in `order`
  uint32_t finished = 0;
  uint32_t warp_waiting = 0;                     // threads waiting at a warp operation
  uint8_t* smem = nullptr;
  SmemCell* smem_shadow = nullptr;
  size_t smem_used = 0;  // dynamic part + static arrays declared so far
  std::vector<std::pair<const void*, size_t>> sites;  // static array -> offset
  bool faulted = false;
  uint64_t preempt_draws = 0;  // RINGTAPE_EMU_SCHEDULE=random's state (Note [Thread order])
  BlockPerf* perf = nullptr;  // the kernel lab's logs, when the launch is recorded (perf.h)
};

// Note [Races between blocks] in memcheck.cc: the tag of block `linear` of launch `id`, or 0
// when the launch's blocks are not checked (one block, or more than the tag holds).
uint64_t race_tag(uint64_t launch_id, uint64_t linear_block, uint64_t nblocks);

// RINGTAPE_EMU_SEED (default 1), read once; a value that is not a number exits with a message.
// The thread orders (Note [Thread order]) and device numerics (Note [Device numerics]) use it.
uint64_t env_seed();

// Note [Thread order] in executor.cc.
enum class Schedule : uint8_t { shuffle, reverse, interleave, random };
Schedule env_schedule();
const char* schedule_name(Schedule s);
// Whether threads are switched out at memory accesses (interleave, random); read once.
inline bool preempts_at_accesses() {
  static const bool p = env_schedule() == Schedule::interleave || env_schedule() == Schedule::random;
  return p;
}
// Before a global or shared access of `th`: switches to the block's next thread where the
// schedule says so.
void preemption_point(ThreadCtx& th);

}  // namespace rt::emu
