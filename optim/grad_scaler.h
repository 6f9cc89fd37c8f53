// Dynamic loss scaling, torch.cuda.amp.GradScaler's rules: the loss is multiplied by the
// scale before backward; before the optimizer step every gradient is multiplied by
// 1/scale and checked for inf/NaN; a step with a non-finite gradient is skipped and the
// scale backs off, and after `growth_interval` clean steps in a row the scale grows.
// Works on CPU and CUDA gradients (CUDA: kernels/cuda/loss_scale.cu, with the found-inf
// flag on the device, read by the host once per step).
//
// Use:  scaler.scale(loss).backward(); scaler.step(opt); scaler.update();
#pragma once

#include <map>
#include <string>

#include "engine/tensor.h"
#include "kernels/cuda/multi_tensor_table.h"
#include "optim/optimizer.h"

namespace rt::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& opt = {});

  // loss * scale (differentiable).
  Tensor scale(const Tensor& loss) const;
  // Multiplies the gradients of opt's parameters by 1/scale (once per step; a second call
  // before update() is an error) and returns whether one of them holds inf or NaN.
  bool unscale(Optimizer& opt);
  // Unscales (unless unscale() already ran this step), then runs opt.step() if every
  // gradient is finite. Returns whether the optimizer stepped.
  bool step(Optimizer& opt);
  // Adjusts the scale from this step's finding (backoff on inf/NaN, growth after
  // growth_interval clean steps) and starts the next step.
  void update();

  double get_scale() const { return double(scale_); }
  int growth_tracker() const { return growth_tracker_; }

  // What a resumed run needs, like PyTorch's GradScaler.state_dict(): "scale" (f32, 0-D)
  // and "growth_tracker" (i64, 0-D). load_state() checks both entries (and that no step is
  // half done) before restoring them exactly.
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state);

 private:
  GradScalerOptions opt_;
  float scale_;  // f32, like PyTorch's _scale tensor
  int growth_tracker_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
  cuda::MultiTensorTable tables_[2];  // the f32 and f64 gradients on the device
};

}  // namespace rt::optim
