// What training and evaluation print, and the metrics.jsonl records that go with the
// training and evaluation lines (train/metrics.h). On a data-parallel run only the logging
// rank prints and writes these (Note [Data-parallel attach points]).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/precision.h"

namespace rt::train {

// The training steps between two log lines.
struct LogWindow {
  explicit LogWindow(int64_t first) : first_step(first) {}

  int64_t first_step;   // 1-based, like the log lines
  double loss_sum = 0;  // over the steps that stood (from the LossMeter, at the log line)
  int64_t steps = 0, skipped = 0, overflow_skips = 0, samples = 0;

  // Mean loss of the steps that stood; NaN when every one was skipped (written as null).
  double mean_loss() const;
};

class TrainLog {
 public:
  // `logging_rank`: this process prints the lines and appends to `metrics_path`; the others
  // do neither. Steps are counted towards `max_steps`, from `start_step` (the eta's rate).
  // `skip_nonfinite`: the records count skipped steps.
  TrainLog(const std::string& metrics_path, bool logging_rank, int64_t start_step, int64_t max_steps,
           bool skip_nonfinite);

  // "training on cpu: 64 images, 8 steps per epoch, ..."; the clock starts here.
  void start(Device device, int64_t images, int64_t steps_per_epoch, int64_t epochs, const std::string& schedule,
             const std::string& output_dir);
  // A training line and record for the steps of window `w`, ending at `p`.
  void train(const Progress& p, double lr, const LogWindow& w, const MixedPrecision& mp);
  // The end-of-epoch evaluation's; `skipped_train`: unreadable training images of the epoch.
  void eval(const Progress& p, const EvalResult& e, int64_t skipped_train);
  // The last line: steps done, time, skipped steps, where the weights are.
  void done(int64_t steps, int64_t skipped_steps, const std::string& weights_path);
  // Data parallel: who takes part and the global batch (first); the communication hidden
  // behind backward (last), also a metrics.jsonl record of type "overlap".
  void parallel(const std::string& describe, int world, int64_t batch, int64_t accum_steps);
  void overlap(const OverlapStats& o);

 private:
  using Clock = std::chrono::steady_clock;
  std::optional<MetricsLog> metrics_;  // the logging rank's
  int64_t start_step_, max_steps_;
  int world_ = 1;  // processes training together (img/s counts all of theirs)
  bool skip_nonfinite_;
  Clock::time_point t_start_, t_log_;
};

// `ringtape eval`'s line: "eval MODEL on DATASET: loss ... (N images, R img/s)".
void print_eval(const std::string& model, const std::string& dataset, const EvalResult& e, double seconds);

}  // namespace rt::train
