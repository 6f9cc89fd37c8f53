// The profile of a few training steps, summarised from the recorded events
// (engine/profiler.h): tables grouped by op, layer or kernel with achieved GFLOP/s, GB/s
// and % of the device's peaks (profile/peaks.h), forward and backward apart, and the
// steps' totals. Printed at the end of the profiled steps and written as profile.json.
//
// Note [Profile times]
// On the CPU an op's time is its scope's self time (wall clock minus the ops it called). On
// a GPU it is the summed duration of the kernels it launched (CUPTI, linked by the op's
// id), and its host time, the launch overhead, is shown apart. The totals split each step's
// wall time: on the CPU into the ops' self time and the host time outside any op (autograd
// bookkeeping, waiting for a batch, the loop itself); on a GPU into kernel time (compute,
// communication: NCCL's kernels), copies, and idle gaps (the step's time during which no
// kernel or copy ran).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/io/json.h"
#include "engine/profiler.h"
#include "profile/peaks.h"

namespace rt::prof {

enum class Group { op, layer, kernel };
const char* group_name(Group g);
// "op", "layer" or "kernel"; anything else throws naming the accepted values.
Group parse_group(const std::string& s);

struct Row {
  std::string name;  // op, layer path or kernel name
  std::string pass;  // "forward", "backward", "optimizer", ... (the phase it ran in; "other" outside)
  std::string dtype;      // the inputs' dtype ("f32"; "" when unknown)
  int64_t calls = 0;
  double seconds = 0;       // Note [Profile times]
  double host_seconds = 0;  // GPU: the host's time in the op's scopes; CPU: = seconds
  double flops = 0, bytes = 0;
};

struct Totals {
  int64_t steps = 0;
  double wall_s = 0;           // the steps' wall time
  double op_s = 0;             // CPU: the ops' self time; GPU: the host's time in op scopes
  double outside_ops_s = 0;    // CPU: wall - op_s (autograd, data, the loop)
  double forward_s = 0, backward_s = 0, optimizer_s = 0, data_s = 0;  // the phases' wall time
  double gpu_compute_s = 0, gpu_comm_s = 0, gpu_copy_s = 0, gpu_idle_s = 0;  // GPU only
  double flops = 0, bytes = 0;
};

struct Profile {
  std::string device;  // "cpu", "cuda:0"
  bool gpu = false;
  DevicePeaks peaks;
  bool tf32 = false;   // f32 matmuls on tensor cores (peak: tf32's)
  int64_t first_step = 0, end_step = 0;  // the steps recorded: [first_step, end_step)
  Totals totals;
  std::vector<Row> by_op, by_layer, by_kernel;  // sorted by time, longest first
  const std::vector<Row>& rows(Group g) const;
};

// Summarises events recorded over steps [first, end) on `device`.
Profile summarize(const std::vector<Event>& events, Device device, const DevicePeaks& peaks, bool tf32,
                  int64_t first_step, int64_t end_step);

// The table of group g (the `top` longest rows, then one line for the rest) and the totals.
std::string format_table(const Profile& p, Group g, int top = 30);
json::Value to_json(const Profile& p);

}  // namespace rt::prof
