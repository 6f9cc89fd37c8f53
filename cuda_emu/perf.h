// The kernel lab's counters (Note [Kernel lab] in perf.cc): what the executor and the memory
// checker tell the recorder. Internal to the emulated device, like internal.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace rt::emu {

struct BlockCtx;
struct ThreadCtx;
struct Op;

// RINGTAPE_EMU_PERF names a file: the lab records, and writes the file at exit.
bool perf_enabled();
// Whether work queued now is recorded: enabled, and inside the window if one was opened
// (perf_window in emu.h).
bool perf_recording();

// One launch's counters while its blocks run; created by the first block of a recorded
// launch (Op::perf), aggregated into the process's records by perf_op_done.
struct LaunchPerf;
std::shared_ptr<LaunchPerf> perf_new_launch();

// Per block, on the host thread running it: begin (the thread logs), each global or shared
// access of its GPU threads, each barrier release (the epoch's accesses become warp-level
// requests, Note [Warp-level requests]), the end (its counters into the launch's).
void perf_block_begin(BlockCtx& b);
void perf_access(ThreadCtx& t, uintptr_t a, size_t n, bool write, bool atomic, const void* pc);
void perf_epoch_end(BlockCtx& b);
void perf_block_end(BlockCtx& b);

// The flops hint of the next launch from this host thread (simt.h's next_launch_flops),
// taken by the launch: 0 when none.
void take_launch_flops(double* flops, bool* f64);

// A recorded operation has run (kernel, copy, memset, library call): into the records.
void perf_op_done(const Op& op);
// A cudaGraphLaunch queued while the lab records (Note [Graph launches in the lab] in cuda_emu/perf.cc).
void perf_graph_launch();

}  // namespace rt::emu
