// Where each rank's step time goes, and which rank holds the others back.
//
// Note [Stragglers]
// In data-parallel training every rank waits for the slowest in each gradient all-reduce, so
// the step time of every rank is the slowest one's and the job's throughput says nothing about
// who is slow: the slow rank is the one that waits least. So each rank splits its steps into
// phases on its host clock (TrainStep, train/step.cc): data (waiting for the loader's batch),
// forward, backward, comm (waiting for the averaged gradients, before_optimizer_step),
// optimizer, and other (the rest of the step: a replayed CUDA graph, --skip-nonfinite's
// checks). Every --print-freq steps the ranks' sums travel in the all-reduce the log line
// already makes (Note [Logged loss] in train/trainer.cc: each rank fills its own slots, so the
// sum is an all-gather), and rank 0 compares each rank's busy time (its step less comm: the
// wait is where a fast rank spends the slow one's extra time) with the median of the other
// ranks' (with two ranks, the other one's). A rank busier than that by more than
// --straggler-threshold in kStragglerWindows consecutive windows is named in the log with the
// phase that differs most from the other ranks' median of that phase, over those windows:
//   rank 2 is 34% slower than the other ranks' median over the last 30 steps: data 41.0 ms vs 3.0 ms per step
// It is named again every kStragglerWindows windows while it stays slow, and once more when
// it no longer is. At the end rank 0 prints a per-rank table (metrics.jsonl: "ranks"), and with
// --tensorboard every window's phases per rank are scalars (ranks/rank_K/<phase>_ms).
// On CUDA the host only queues work, so its clock says little; where the reducer has the
// device's timeline of a step (Note [Two clocks] in distributed/reducer.h: eager steps, not
// replayed CUDA graphs) the window's forward, backward and comm are the device's instead
// (with_device_clock): backward from its start to its end, comm from there to the averaged
// gradients, and forward what the device ran between two steps' gradient waits (the update and
// the next forward, an evaluation or a checkpoint when one fell in between) less the host's wait
// for data, during which the device was idle; optimizer and other are then 0. Data stays the
// host's wait for the loader.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace rt::train {

enum class Phase { data, forward, backward, comm, optimizer, other };
inline constexpr int kPhases = 6;
const char* phase_name(Phase p);

// Phase times summed over `steps` steps (seconds).
struct PhaseTimes {
  std::array<double, kPhases> seconds{};
  int64_t steps = 0;
  double& operator[](Phase p) { return seconds[size_t(p)]; }
  double operator[](Phase p) const { return seconds[size_t(p)]; }
  double total() const;
  double busy() const { return total() - (*this)[Phase::comm]; }  // Note [Stragglers]
  PhaseTimes& operator+=(const PhaseTimes& o);
  // Packed as kPhases + 1 doubles (the seconds, then steps), for the all-gather.
  static constexpr int kPacked = kPhases + 1;
  void pack(double* out) const;
  static PhaseTimes unpack(const double* in);
};

// Adds the time from its construction to its end to `times[p]`. RINGTAPE_FAULT's
// slow:RANK:PHASE:MS sleeps at its start on that rank (distributed/fault.h; tests).
class PhaseScope {
 public:
  PhaseScope(PhaseTimes& times, Phase p, int rank);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseTimes& times_;
  Phase phase_;
  std::chrono::steady_clock::time_point start_;
};

inline constexpr int kStragglerWindows = 3;  // consecutive windows before a rank is named

// Rank 0's view of every rank's windows (Note [Stragglers]).
class StragglerMonitor {
 public:
  // `threshold`: the fraction above the median's busy time (0.2 = 20%) that counts as slow.
  StragglerMonitor(int world, double threshold);

  // One window's sums per rank (index = rank), ending at `step`; returns the lines to log.
  std::vector<std::string> observe(const std::vector<PhaseTimes>& by_rank);
  // The per-rank means over the run so far, one line per rank with a header ("" before any window).
  std::string table() const;
  const std::vector<PhaseTimes>& totals() const { return totals_; }

 private:
  int world_;
  double threshold_;
  std::vector<int> streak_;                         // consecutive slow windows, per rank
  std::vector<std::vector<PhaseTimes>> in_streak_;  // [rank][rank]: every rank's sums over rank's streak
  std::vector<PhaseTimes> totals_;                  // per rank, the whole run
};

// `host`'s data phase with `device`'s forward, backward and comm (Note [Stragglers]), scaled to
// `host`'s steps (the device's timelines come a step or more late); `host` when `device` has no step.
PhaseTimes with_device_clock(const PhaseTimes& host, const PhaseTimes& device);

// The median of `v` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> v);

}  // namespace rt::train
