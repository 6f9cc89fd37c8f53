// Dynamic loss scaling, torch.cuda.amp.GradScaler's rules: the loss is multiplied by the
// scale before backward; before the optimizer step every gradient is multiplied by
// 1/scale and checked for inf/NaN; a step with a non-finite gradient is skipped and the
// scale backs off, and after `growth_interval` clean steps in a row the scale grows.
// Works on CPU and CUDA gradients. On CUDA the scale, the growth tracker, the found-inf flag
// and the count of skipped steps live in device memory (kernels/cuda/loss_scale.cu), so the
// step can be captured as a CUDA graph (Note [Loss scaling in a captured step] in
// grad_scaler.cc); an eager step reads the flag on the host once.
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
  // `device`: the gradients' device. A CUDA device keeps the scaler's state in its memory.
  explicit GradScaler(const GradScalerOptions& opt = {}, Device device = Device::cpu());

  // loss * scale (differentiable).
  Tensor scale(const Tensor& loss) const;
  // Multiplies the gradients of opt's parameters by 1/scale (once per step; a second call
  // before update() is an error) and returns whether one of them holds inf or NaN (false
  // while the step is being captured: the device decides then).
  bool unscale(Optimizer& opt);
  // Unscales (unless unscale() already ran this step), then runs opt.step() if every
  // gradient is finite. Returns whether the optimizer stepped. While captured, opt.step()
  // runs with the found-inf flag as its skip flag (opt.takes_skip_flag() must hold) and
  // this returns true.
  bool step(Optimizer& opt);
  // Adjusts the scale from this step's finding (backoff on inf/NaN, growth after
  // growth_interval clean steps) and starts the next step.
  void update();

  // On CUDA these read device memory (the host waits for the device).
  double get_scale() const;
  int growth_tracker() const;
  int64_t skipped_steps() const;  // steps skipped on inf/NaN since construction

  // What a resumed run needs, like PyTorch's GradScaler.state_dict(): "scale" (f32, 0-D)
  // and "growth_tracker" (i64, 0-D). load_state() checks both entries (and that no step is
  // half done) before restoring them exactly.
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state);

 private:
  bool on_cuda() const { return device_.is_cuda(); }

  GradScalerOptions opt_;
  Device device_;
  // The CPU's state.
  float scale_;  // f32, like PyTorch's _scale tensor
  int growth_tracker_ = 0;
  int64_t skipped_ = 0;
  // CUDA's: () f32 scale, (1,) i32 growth tracker, (1,) i64 skipped steps, (1,) f32 found-inf flag.
  Tensor scale_on_device_, tracker_on_device_, skipped_on_device_, found_on_device_;
  bool unscaled_ = false;
  bool found_inf_ = false;   // the host's finding (false while captured)
  bool captured_ = false;    // this step is being captured: the device decides
  cuda::MultiTensorTable tables_[2];  // the f32 and f64 gradients on the device
};

}  // namespace rt::optim
