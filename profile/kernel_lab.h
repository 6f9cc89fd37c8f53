// The kernel lab's step report (docs/kernel-lab.md): the emulator's records of one training
// step (RINGTAPE_EMU_PERF, Note [Kernel lab] in cuda_emu/perf.cc) at a few small batches,
// merged per kernel and launch site, extrapolated to the batch an H200 trains at, and
// bounded there (cuda_emu/h200.h): a table sorted by bound time, the step's bound for the
// hand-written kernels and the library calls, the launches per step, the images per second
// the bound implies, JSON, and an SVG roofline.
//
// Note [Extrapolating the lab]
// Emulating ResNet50 at batch 256 would take hours, so the step is measured at small
// batches b (1, 2, 4) and every counter of a row (a kernel at one launch site summed over
// the step's launches, or a library function summed over its calls) is taken as linear in
// the batch, v(b) = a + c b: the line through the two largest batches, extended to the
// target. It holds where work scales with the images (grids over N x C x H x W), with a
// constant part where it does not (per-channel finalisations, weights, the optimizer). The
// check: every other measured batch must lie on the line (within 2%, or 1 unit); a row where
// some counter does not is reported with the counters that break it (a grid capped at a
// fixed size, tiles with remainders), and its value at the target is the line's anyway.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/json.h"

namespace rt::prof::lab {

// The counters of one row at one batch (sums over the step's launches).
struct Counters {
  double launches = 0, blocks = 0;
  double gld_req = 0, gld_sec = 0, gld_ideal = 0, gst_req = 0, gst_sec = 0, gst_ideal = 0;
  double shld_req = 0, shst_req = 0, sh_wave = 0, sh_conf = 0, atomics = 0;
  double instructions = 0, lanes = 0;  // memory instructions, and their active lanes summed
  double dram_bytes = 0, flops = 0;
};

struct Row {
  std::string kind;    // "kernel", "library", "memcpy", "memset"
  std::string kernel;  // the instantiated kernel, or the library operation
  std::string site;    // file:line of the launch (library: the API function)
  std::string math;    // the peak its FLOPs count against (cuda_emu/h200.h peak_flops)
  // From the row's most launched configuration: block size, registers (-1: unknown to
  // ptxas's report), static + dynamic shared memory.
  int threads = 0, registers = -1;
  int64_t shared_bytes = 0;
  std::vector<Counters> measured;  // per measured batch, in Lab::batches' order
  Counters target;                 // at Lab::target (Note [Extrapolating the lab])
  std::vector<std::string> nonlinear;  // counters off the line, "not at every batch", ...
  // On an H200 at the target batch (h200.h).
  double occupancy = 0, waves = 0, memory_us = 0, compute_us = 0, launch_us = 0, bound_us = 0;
  std::string limiter;
  double sector_efficiency() const;   // ideal / actual sectors, loads and stores (1 when none)
  double conflicts_per_request() const;  // extra shared wavefronts per shared request
};

struct Summary {
  double kernel_us = 0, library_us = 0, copy_us = 0, total_us = 0;  // the step's bound, by kind
  double kernel_launches = 0, library_calls = 0, copies = 0, launches = 0;
  double kernel_bytes = 0;   // DRAM bytes of the hand-written kernels per step
  // Launches the host makes per step: each cudaGraphLaunch once, its nodes not (the lab
  // file's `host_launches`, Note [Graph launches in the lab] in cuda_emu/perf.cc; the largest
  // batch's, it does not grow with the batch); -1 for a file without it.
  double host_launches = -1, graph_launches = -1;
  double images_per_s = 0;   // target / total
};

struct Lab {
  std::vector<int> batches;  // measured, ascending
  int target = 0;
  std::vector<Row> rows;     // sorted by bound_us at the target, largest first
  Summary summary;
};

// Reads the records of the step at each (batch, file) and extrapolates to `target`.
// Errors name the file: not the lab's format, a batch given twice, fewer than two batches.
Lab load(const std::vector<std::pair<int, std::string>>& files, int target);
// The same from parsed documents.
Lab build(const std::vector<std::pair<int, json::Value>>& docs, int target);

// The table: `top` rows (0: all), then the summary lines.
std::string table(const Lab& lab, int top);
json::Value to_json(const Lab& lab);
// A roofline: each row with FLOPs a point at (FLOPs per DRAM byte, FLOP/s at its bound),
// the H200's memory roof and its FP32 and tensor-core roofs drawn.
std::string roofline_svg(const Lab& lab, const std::string& title);

// "rt::cuda::{anonymous}::map_vec<__nv_bfloat16, rt::cuda::Relu>" -> "map_vec<__nv_bfloat16, Relu>".
std::string short_name(const std::string& kernel);

}  // namespace rt::prof::lab
