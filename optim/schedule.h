// Learning-rate schedules, evaluated per optimizer step: an optional warmup, then one main
// schedule. Set the optimizer's lr to lr_at(step) before each step().
//
// The warmup is torchvision's --lr-warmup-method: linear is LinearLR from
// lr * warmup_decay up to lr over warmup_epochs, but interpolated per step rather than
// per epoch; constant is ConstantLR, lr * warmup_decay for warmup_epochs. The main
// schedule then starts its own clock at the end of the warmup, as torchvision's
// SequentialLR restarts the main scheduler there: with 5 warmup epochs, a step schedule of
// step_size 30 decays at epochs 35, 65, ..., multistep milestones {30, 60} at epochs 35 and
// 65, and cosine / poly anneal over the remaining epochs.
//
// Note [MLPerf schedule]
// MLPerf's ResNet-50 reference (TensorFlow, LARS) warms up linearly from 0: at step s of W
// warmup steps lr * s / W, so its first step has lr 0; then a polynomial decay
// (tf.train.polynomial_decay) of the steps past the warmup, counted from at least 1, over
// T - W + 1 steps (T the training's): lr_end + (lr - lr_end) * (1 - min(max(1, s - W), D) / D)^power
// with D = T - W + 1, power 2 and lr_end 1e-4 in the reference; the warmup's rule holds up to
// and including step W (its test is current_epoch <= warmup epochs), where it gives lr. WarmupMethod::mlperf with
// the poly schedule is that rule exactly (lr_min is lr_end); with another main schedule it
// is only the warmup from 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rt::optim {

enum class LrScheduleKind { constant, step, multistep, cosine, poly };

// "constant" | "step" | "multistep" | "cosine" | "poly" (the CLI's names); anything else
// is an error listing them.
LrScheduleKind parse_lr_schedule(const std::string& name);
const char* lr_schedule_name(LrScheduleKind kind);
// "30,60,80" -> {30, 60, 80} (the CLI's --lr-milestones); errors name the bad part.
std::vector<int64_t> parse_milestones(const std::string& text);

// linear and constant: torchvision's LinearLR and ConstantLR (see the top of this file).
// mlperf: the MLPerf ResNet-50 reference's poly_rate_schedule (Note [MLPerf schedule]).
enum class WarmupMethod { linear, constant, mlperf };

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::constant;
  int64_t warmup_epochs = 0;
  WarmupMethod warmup_method = WarmupMethod::linear;
  double warmup_decay = 0.01;       // the warmup's (first) factor (torchvision's --lr-warmup-decay)
  int64_t step_size = 30;           // step: epochs between decays
  double gamma = 0.1;               // step, multistep: factor per decay
  std::vector<int64_t> milestones;  // multistep: epochs after the warmup, increasing
  double lr_min = 0.0;              // cosine, poly: the final lr
  double power = 1.0;               // poly: lr * (1 - t/T)^power

  bool operator==(const LrScheduleOptions&) const = default;
};

class LrSchedule {
 public:
  // Checks the options the chosen kind uses; errors name the option and the value.
  LrSchedule(double base_lr, int64_t steps_per_epoch, int64_t epochs, LrScheduleOptions opt = {});

  // The lr of optimizer step `step` (0-based). Past the last step, cosine and poly stay
  // at their final value and the others continue their rule.
  double lr_at(int64_t step) const;

  int64_t total_steps() const { return steps_per_epoch_ * epochs_; }
  int64_t warmup_steps() const { return steps_per_epoch_ * opt_.warmup_epochs; }
  const LrScheduleOptions& options() const { return opt_; }
  std::string describe() const;  // one line for the training log

 private:
  double main_lr(int64_t t) const;  // t: steps since the warmup ended

  double base_lr_;
  int64_t steps_per_epoch_, epochs_;
  LrScheduleOptions opt_;
};

}  // namespace rt::optim
