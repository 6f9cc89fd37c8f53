#include "train/step.h"

#include <cmath>
#include <cstdio>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/memory_tag.h"
#include "engine/profiler.h"

namespace rt::train {

TrainStep::TrainStep(nn::Module& model, optim::Optimizer& opt, MixedPrecision& mp, ParallelContext& par,
                     const LoopConfig& loop, double label_smoothing, Device device)
    : model_(model),
      opt_(opt),
      mp_(mp),
      par_(par),
      accum_(loop.accum_steps),
      label_smoothing_(label_smoothing),
      skip_nonfinite_(loop.skip_nonfinite),
      loss_on_device_(device.is_cuda() && !loop.skip_nonfinite),
      losses_(!loss_on_device_) {
  if (skip_nonfinite_) good_ = TrainState::take(model_, opt_, mp_);
}

StepOutcome TrainStep::run(data::DeviceFeeder& feed, const Progress& p) {
  StepOutcome out;
  std::string skip_why;  // why this step is skipped (--skip-nonfinite); "" while it stands
  // Phases (prof::RangeScope): named ranges in NVTX and in a profile (Note [Profiler scopes]).
  using prof::EventKind;
  for (int64_t micro = 0; micro < accum_; ++micro) {
    std::optional<data::DeviceBatch> b;
    {
      const prof::RangeScope phase(EventKind::phase, "data");
      b = feed.next();
    }
    if (!b) {  // the end of the epoch: a partial accumulation is dropped, like drop_last
      losses_.end_step(false);
      opt_.zero_grad();
      return out;
    }
    out.samples += b->input.size(0);
    Tensor loss;
    std::optional<double> l;
    {
      const prof::RangeScope phase(EventKind::phase, "forward");
      const MemoryTagScope tag(MemoryTag::activations);  // what the allocator attributes (engine/memory_tag.h)
      loss = cross_entropy(mp_.forward(b->input), b->labels, label_smoothing_);
      l = losses_.add(loss, accum_);  // nullopt: it stays on the device
    }
    if (l && skip_why.empty() && !std::isfinite(*l)) skip_why = nonfinite_loss(*l, b->input, p);
    if (!skip_why.empty()) continue;  // the rest of a skipped step only reads its batches
    if (accum_ > 1) loss = mul(loss, 1.0 / double(accum_));
    const bool last = micro + 1 == accum_;
    const prof::RangeScope phase(EventKind::phase, "backward");
    const MemoryTagScope tag(MemoryTag::gradients);
    par_.before_backward(last);
    mp_.backward(loss);  // the gradients sum over the micro-batches
    par_.after_backward(last);
  }
  const prof::RangeScope phase(EventKind::phase, "optimizer");
  const MemoryTagScope tag(MemoryTag::optimizer_state);
  out.complete = stepped_ = true;
  if (skip_why.empty()) {
    par_.before_optimizer_step();
    skip_why = nonfinite_gradients();
  }
  if (skip_why.empty()) out.overflow = !mp_.step(opt_);
  opt_.zero_grad();
  if (skip_why.empty()) skip_why = nonfinite_update();
  losses_.end_step(skip_why.empty());
  if (!skip_why.empty()) {
    good_->restore(model_, opt_, mp_);
    out.skipped = true;
    std::fprintf(stderr, "step %ld skipped (--skip-nonfinite; weights and optimizer state unchanged): %s\n",
                 p.step + 1, skip_why.c_str());
  }
  return out;
}

// Without --skip-nonfinite this throws, naming the cause; with it, returns why the step is
// skipped.
std::string TrainStep::nonfinite_loss(double loss, const Tensor& input, const Progress& p) const {
  const std::string cause = nonfinite_loss_cause(input, model_, stepped_, skip_nonfinite_);
  RT_CHECK(skip_nonfinite_, "loss is ", loss, " at step ", p.step + 1, " (epoch ", p.epoch, "): ", cause);
  return "loss " + std::to_string(loss) + ": " + cause;
}

std::string TrainStep::nonfinite_gradients() const {
  // fp16's loss scaler checks the gradients itself (and skips on overflow).
  if (!skip_nonfinite_ || mp_.loss_scaling()) return "";
  const auto bad = first_nonfinite(gradients(opt_));
  return bad ? "the gradient of '" + *bad + "' is NaN or Inf" : "";
}

std::string TrainStep::nonfinite_update() {
  if (!skip_nonfinite_) return "";
  TrainState after = TrainState::take(model_, opt_, mp_);
  if (const auto bad = after.first_nonfinite()) return "the step made '" + *bad + "' NaN or Inf";
  good_ = std::move(after);
  return "";
}

double TrainStep::window_loss(int64_t first_step, const Progress& p) const {
  const double sum = losses_.window_sum();  // on CUDA the host waits here (Note [Loss on the device])
  if (!loss_on_device_ || std::isfinite(sum)) return sum;
  // Read each step, a NaN/Inf loss was found at its step; kept on the device, it is found
  // here, at the latest.
  const auto bad = first_nonfinite(model_.named_parameters());
  RT_FAIL("loss is ", sum, " in steps ", first_step, "-", p.step, " (epoch ", p.epoch,
          "; on CUDA the loss is read at each --print-freq step and before a checkpoint): ",
          bad ? "'" + *bad + "' is now NaN or Inf: training diverged (or a batch held NaN/Inf). Lower --lr, add "
                    "--lr-warmup-epochs, or pass --skip-nonfinite, which checks every step and names the cause"
              : "the weights are finite: an input batch held NaN or Inf, or the loss overflowed; "
                "--skip-nonfinite checks every step and names the cause");
}

}  // namespace rt::train
