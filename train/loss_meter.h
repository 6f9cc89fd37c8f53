// The running training loss between two log lines, kept where it is computed.
//
// Note [Loss on the device]
// Reading a CUDA loss on the host (item()) waits for the forward to finish before the
// backward is even queued. So on CUDA the step losses are summed into a device f64 scalar
// with in-place adds, and the host reads the sum only where it is needed: at a --print-freq
// log line, and before a checkpoint (no checkpoint after an unseen NaN). A NaN/Inf loss is
// then found at that point, not at its step; the steps in between have run on it (without
// --skip-nonfinite training stops there anyway). --skip-nonfinite must decide each step
// before its update, so with it the loss is read every step, as it always is on the CPU,
// where item() costs nothing: there the sums are exactly the host arithmetic of
// before (Note [Exact resume]).
#pragma once

#include <optional>

#include "engine/tensor.h"

namespace rt::train {

class LossMeter {
 public:
  // `read_each_step`: the host reads every loss (CPU, or --skip-nonfinite); else the
  // sums stay on the device.
  explicit LossMeter(bool read_each_step) : read_each_step_(read_each_step) {}

  // A micro-batch's loss (0-D) of a step of `accum` micro-batches, counted as loss/accum
  // in the step. Returns its value when losses are read each step, else nullopt.
  std::optional<double> add(const Tensor& loss, int64_t accum);
  // The step is over: its loss joins the window when it `stood`, else it is dropped
  // (a skipped step, or the incomplete accumulation at the end of an epoch).
  void end_step(bool stood);
  // The window's sum of the losses of the steps that stood (reads the device).
  double window_sum() const;
  void reset_window();  // a log line was written

 private:
  bool read_each_step_;
  double step_ = 0, window_ = 0;  // read each step
  Tensor step_dev_, window_dev_;  // on the device: f64 0-D, undefined while zero
};

}  // namespace rt::train
