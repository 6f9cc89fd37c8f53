// What training and evaluation print, and the metrics.jsonl records that go with the
// training and evaluation lines (train/metrics.h); on a terminal a progress bar instead of
// the training lines (train/progress_bar.h); with --tensorboard the same numbers as
// TensorBoard scalars (train/tensorboard.h). On a data-parallel run only the logging rank
// prints and writes these (Note [Data-parallel attach points]).
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/precision.h"
#include "train/progress_bar.h"
#include "train/straggler.h"
#include "train/tensorboard.h"

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

// What the logging rank writes besides the lines and metrics.jsonl.
struct LiveOutputs {
  int bar_columns = 0;          // bar_columns(): draw the progress bar this wide; 0 = print the training lines
  std::string tensorboard_dir;  // "" = no TensorBoard events
};

class TrainLog {
 public:
  // `logging_rank`: this process prints the lines, appends to `metrics_path` and writes
  // `live`; the others do none of it. Steps are counted towards `max_steps`, from
  // `start_step` (the eta's rate). `skip_nonfinite`: the records count skipped steps.
  TrainLog(const std::string& metrics_path, bool logging_rank, int64_t start_step, int64_t max_steps,
           bool skip_nonfinite, const LiveOutputs& live = {});

  // "training on cpu: 64 images, 8 steps per epoch, ..."; the clock starts here.
  void start(Device device, int64_t images, int64_t steps_per_epoch, int64_t epochs, const std::string& schedule,
             const std::string& output_dir);
  // An epoch's steps begin (again, after a resume) at `p`: the bar's rate counts from here.
  void begin_epoch(const Progress& p);
  // After every optimizer step, `step_in_epoch` steps of the epoch done: the bar, which
  // reads nothing from the device (Note [Bar without host sync]); it redraws at most 4
  // times a second, and always at the epoch's (or the run's) last step.
  void step(const Progress& p, int64_t step_in_epoch, double lr);
  // A training record for the steps of window `w`, ending at `p`, and its line, unless the
  // bar is drawn (then it is printed only when steps were skipped on NaN/Inf).
  void train(const Progress& p, double lr, const LogWindow& w, const MixedPrecision& mp);
  // The end-of-epoch evaluation's; `skipped_train`: unreadable training images of the epoch.
  // `ema` (may be null): the EMA weights' evaluation (--model-ema), logged next to the model's.
  void eval(const Progress& p, const EvalResult& e, int64_t skipped_train, const EvalResult* ema = nullptr);
  // The memory this process's device allocator held over the epoch (peaks, what filled it
  // at the peak, by tag: engine/memory_report.h): printed by every rank (`rank K` when
  // data parallel; the other ranks' lines go to their logs/rank-K.log), and a metrics.jsonl
  // record of type "memory" from the logging rank.
  void memory(const Progress& p, Device device, const AllocatorStats& stats, int rank);
  // The last line: steps done, time, skipped steps, where the weights are.
  void done(int64_t steps, int64_t skipped_steps, const std::string& weights_path);
  // Data parallel: who takes part and the global batch (first); the communication hidden
  // behind backward (last), also a metrics.jsonl record of type "overlap".
  void parallel(const std::string& describe, int world, int64_t batch, int64_t accum_steps);
  void overlap(const OverlapStats& o);
  // The launcher restarted the job (round `round`, because of `cause`), which resumed from
  // `checkpoint` ("" = from the start) at `p`: a line and a record of type "restart".
  void restart(const Progress& p, int round, const std::string& cause, const std::string& checkpoint);
  // Data parallel, at every log line: each rank's phase times over the window ending at `p`
  // (index = rank): stragglers named (Note [Stragglers] in train/straggler.h; records of type
  // "straggler") and, with --tensorboard, scalars per rank. `threshold`: --straggler-threshold.
  void phases(const Progress& p, const std::vector<PhaseTimes>& by_rank, double threshold);
  // The per-rank table of phase times over the run (and a record of type "ranks"); after done().
  void rank_table();
  // Ends the bar's line, so that what prints next (an interrupt's message) has its own.
  void end_line();

 private:
  using Clock = std::chrono::steady_clock;
  double run_eta(int64_t step, Clock::time_point now) const;  // seconds to max_steps_ at the run's rate

  std::optional<MetricsLog> metrics_;  // the logging rank's
  std::unique_ptr<ProgressBar> bar_;   // the logging rank's, on a terminal
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // the logging rank's, with --tensorboard
  int64_t start_step_, max_steps_;
  int world_ = 1;  // processes training together (img/s counts all of theirs)
  bool skip_nonfinite_;
  Clock::time_point t_start_, t_log_;
  // The bar's: the epoch's steps and images from begin_epoch() on, and the last loss read.
  int64_t epochs_ = 1, steps_per_epoch_ = 0, epoch_step0_ = 0, epoch_samples0_ = 0;
  Clock::time_point t_epoch_;
  double last_loss_ = NAN;
  std::unique_ptr<StragglerMonitor> stragglers_;  // the logging rank's, data parallel
};

// `ringtape eval`'s line: "eval MODEL on DATASET: loss ... (N images, R img/s)".
void print_eval(const std::string& model, const std::string& dataset, const EvalResult& e, double seconds);

}  // namespace rt::train
