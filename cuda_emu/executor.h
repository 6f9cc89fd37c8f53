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

struct ThreadCtx {
  uint3 idx{};
  uint32_t linear = 0, lane = 0, warp = 0;
  BlockCtx* block = nullptr;
  TState state = TState::fresh;
  boost::context::detail::fcontext_t ctx = nullptr;    // the fiber, while suspended
  boost::context::detail::fcontext_t sched = nullptr;  // the scheduler, while running
  int slot = -1;                                      // its stack
  uintptr_t stack_lo = 0, stack_hi = 0;
  std::source_location where;  // the barrier or warp operation it waits at
  // The pending warp operation (Note [Warp operations] in executor.cc).
  WarpOp wop = WarpOp::sync;
  unsigned wmask = 0, vote = 0;
  int warg = 0, wwidth = 32;
  size_t wbytes = 0;
  alignas(16) unsigned char win[16] = {}, wout[16] = {};
  uint16_t warp_epoch = 0;  // warp-level synchronisations passed
};

// Per byte of the shared arena (memcheck.cc, Note [Shared-memory races]).
struct SmemCell {
  uint32_t gen;      // the block it belongs to; another value: never written in this block
  uint32_t w_epoch;  // barrier epoch of the last write (0: none)
  uint32_t r_epoch;  // ... of the last read
  uint16_t w_tid, r_tid;  // who (r_tid 0xFFFF: several readers in r_epoch)
  uint16_t w_wep, r_wep;  // the thread's warp epoch at the access
};

struct BlockCtx {
  const Op* op = nullptr;
  const KernelLaunch* launch = nullptr;
  uint3 idx{};
  uint32_t nthreads = 0;
  uint32_t epoch = 1;  // barrier epochs passed + 1
  uint32_t gen = 0;    // unique per block run on this worker
  std::vector<ThreadCtx>* threads = nullptr;
  uint8_t* smem = nullptr;
  SmemCell* smem_shadow = nullptr;
  size_t smem_used = 0;  // dynamic part + static arrays declared so far
  std::vector<std::pair<const void*, size_t>> sites;  // static array -> offset
  bool faulted = false;
};

}  // namespace rt::emu
