// One optimizer step: --accum-steps micro-batches, each forward -> loss -> backward, then the
// update, through MixedPrecision (Note [Precision], train/precision.h). The loss stays on the
// device (Note [Loss on the device], train/loss_meter.h); a step whose loss, gradients or
// update is NaN/Inf stops training or, with --skip-nonfinite, is undone
// (Note [Non-finite steps], train/nonfinite.h). The ParallelContext's phases are where data
// parallelism attaches (Note [Data-parallel attach points]).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/loading/device_feeder.h"
#include "engine/nn/module.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/loss_meter.h"
#include "train/nonfinite.h"
#include "train/parallel_context.h"
#include "train/precision.h"
#include "train/straggler.h"
#include "train/train_config.h"

namespace rt::train {

// What a step does to its batches before the forward, and to the gradients before the
// update (the configuration's --mixup-alpha, --cutmix-alpha, --random-erase, --clip-grad-norm).
struct StepOptions {
  uint64_t seed = 0;  // the draws: data/transforms/batch_augment.h, functions of (seed, epoch, batch or position)
  double mixup_alpha = 0, cutmix_alpha = 0, random_erase = 0;
  double clip_grad_norm = 0;
  // --cuda-graphs (Note [The training step as a CUDA graph], step.cc), and why this
  // configuration cannot be captured ("" = it can; the device and world size are the step's).
  bool cuda_graphs = false;
  std::string graph_blocker;
};
StepOptions step_options(const TrainConfig& cfg);

struct StepOutcome {
  bool complete = false;    // false: the epoch ran out of batches within the step (dropped, like drop_last)
  int64_t samples = 0;      // images read, also those of a dropped step
  bool skipped = false;     // --skip-nonfinite undid the step (the reason is on stderr)
};

class TrainStep {
 public:
  // `model`, `opt`, `mp` and `par` must outlive the step. Takes the --skip-nonfinite
  // snapshot of the state now, so construct it after resuming.
  TrainStep(nn::Module& model, optim::Optimizer& opt, MixedPrecision& mp, ParallelContext& par,
            const LoopConfig& loop, double label_smoothing, Device device, const StepOptions& options = {});
  ~TrainStep();

  // The step after `p` (p.step + 1), from the feed's next batches, at the optimizer's lr.
  StepOutcome run(data::DeviceFeeder& feed, const Progress& p);

  // The sum of the losses of the steps that stood since the last reset (reads the device).
  // A NaN/Inf kept on the device stops training here, naming steps first_step..p.step.
  double window_loss(int64_t first_step, const Progress& p) const;
  // The phases' times of the steps since the last reset (Note [Stragglers] in train/straggler.h).
  const PhaseTimes& window_phases() const { return phases_; }
  void reset_window() {
    losses_.reset_window();
    phases_ = PhaseTimes{};
  }

 private:
  // Why the step must be skipped ("" = it stands so far): a NaN/Inf loss (an error without
  // --skip-nonfinite), gradient, or state after the update (which then becomes the good one).
  std::string nonfinite_loss(double loss, const Tensor& input, const Progress& p) const;
  std::string nonfinite_gradients() const;
  // `after`: the state the update made (the good one if the step stands).
  std::string nonfinite_update(std::optional<TrainState>& after) const;
  // `mine` (this rank's reason to skip, "" for none) or another rank's: what every rank
  // decides together (Note [Skipping together], step.cc).
  std::string agree_on_skip(const std::string& mine);
  // The micro-batch's loss after random erasing and mixup/cutmix of its images (in place
  // in `b`; Note [Batch augmentation order], step.cc).
  Tensor loss_of(data::DeviceBatch& b);
  StepOutcome run_on_graph_stream(data::DeviceFeeder& feed, const Progress& p);
  StepOutcome run_eager(data::DeviceFeeder& feed, const Progress& p);
  // --cuda-graphs on CUDA (Note [The training step as a CUDA graph], step.cc).
  StepOutcome run_graphed(data::DeviceFeeder& feed, const Progress& p);
  // Forward, loss, backward, update and zero_grad of one batch: the captured work.
  Tensor step_core(const Tensor& input, const Tensor& labels);
  struct Graphed;

  nn::Module& model_;
  optim::Optimizer& opt_;
  MixedPrecision& mp_;
  ParallelContext& par_;
  int64_t accum_;
  double label_smoothing_;
  StepOptions options_;
  bool skip_nonfinite_;
  bool loss_on_device_;  // CUDA without --skip-nonfinite (Note [Loss on the device])
  LossMeter losses_;
  PhaseTimes phases_;  // this window's (Note [Stragglers])
  bool stepped_ = false;  // a step has run in this process (for the cause of a NaN loss)
  bool core_stepped_ = false;  // step_core's update stood (fp16: false when the host saw its gradients overflow)
  std::optional<TrainState> good_;  // --skip-nonfinite: the state after the last step that stood
  std::unique_ptr<Graphed> graphed_;  // --cuda-graphs where the step can be captured
};

}  // namespace rt::train
