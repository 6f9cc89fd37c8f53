#include "train/loss_meter.h"

#include "engine/ops.h"

namespace rt::train {

std::optional<double> LossMeter::add(const Tensor& loss, int64_t accum) {
  if (read_each_step_) {
    const double l = loss.item();
    step_ += l / double(accum);
    return l;
  }
  const Tensor l = loss.detach().to(DType::f64);
  if (!step_dev_.defined()) step_dev_ = Tensor::zeros(l.shape(), DType::f64, l.device());
  add_(step_dev_, l, 1.0 / double(accum));
  return std::nullopt;
}

void LossMeter::end_step(bool stood) {
  if (stood) {
    window_ += step_;
    if (step_dev_.defined()) {
      if (window_dev_.defined()) add_(window_dev_, step_dev_);
      else window_dev_ = step_dev_;
    }
  }
  step_ = 0;
  step_dev_ = Tensor();
}

double LossMeter::window_sum() const { return window_ + (window_dev_.defined() ? window_dev_.item() : 0.0); }

void LossMeter::reset_window() {
  window_ = 0;
  window_dev_ = Tensor();
}

}  // namespace rt::train
