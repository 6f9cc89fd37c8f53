// torchvision's model EMA (references/classification: --model-ema, --model-ema-steps,
// --model-ema-decay): an exponential moving average of the model's parameters AND buffers
// (batch norm's running statistics and num_batches_tracked), PyTorch 1.13's
// AveragedModel(model, avg_fn=decay * avg + (1 - decay) * p, use_buffers=True).
//
// The EMA lives in a second model of the same architecture: ModelEma averages the live
// model's tensors into that model's tensors, in place. So
//   * evaluating the EMA weights is evaluating the second model (eval mode: its averaged
//     running statistics are used);
//   * model_ema.safetensors with the model's keys is the second model's state_dict();
//   * the checkpoint holds state() (AveragedModel's state_dict keys, so torchvision's
//     checkpoint["model_ema"] loads too).
// Typical use (the trainer):
//   auto ema_model = make_model(same config); ema_model->to(device, format); ->to(dtype) as the model;
//   ModelEmaOptions o;
//   o.decay = ema_decay_for(model_ema_decay, world_size, batch_size, model_ema_steps, epochs);
//   o.steps = model_ema_steps;  o.warmup_epochs = lr_warmup_epochs;
//   ModelEma ema(model->state_dict(), ema_model->state_dict(), o);   // copies the model in
//   if (resuming) ema.load_state(checkpoint's EMA entries);
//   per iteration i (0-based within the epoch), after optimizer.step():
//     ema.after_optimizer_step(epoch, i);
//   evaluate(*ema_model, ...) after each epoch; save_safetensors(ema_model->state_dict()).
//
// Note [EMA rounding]
// AveragedModel.update_parameters copies each tensor while n_averaged == 0, else evaluates
// the Python expression `decay * avg + (1 - decay) * p` on the tensor and copies it back.
// ATen computes it in three ops in the tensor's dtype: the Python floats decay and
// (1 - decay) (computed in double) are rounded to the dtype, each product rounds, then the
// sum rounds (add's alpha is 1: its fmadd is a plain add). No FMA: optim/ is built with
// -ffp-contract=off and kernels/cuda/ema.cu uses _rn intrinsics, so f32 and f64 match
// PyTorch and each other bit for bit (tests/optim/ema_golden.safetensors holds f32 to it).
// An int64 tensor (num_batches_tracked) times a Python float is a float32 tensor: the
// count converts to f32 (round to nearest: inexact above 2^24), the f32 result truncates
// toward zero when copied back into the int64 tensor. Both are matched.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "engine/nn/module.h"
#include "kernels/cuda/multi_tensor_table.h"

namespace rt::optim {

// torchvision train.py's decay for --model-ema-decay `decay`, keeping the EMA's horizon
// independent of the number of updates per epoch (in double, as Python computes it):
//   adjust = world_size * batch_size * ema_steps / epochs
//   alpha = min(1, (1 - decay) * adjust);  returns 1 - alpha
double ema_decay_for(double decay, int64_t world_size, int64_t batch_size, int64_t ema_steps, int64_t epochs);

// torchvision's --model-ema-decay default (per image, before ema_decay_for's adjustment): the
// one place it is written (train::EmaConfig and the flag's help take it from here).
inline constexpr double kModelEmaDecay = 0.99998;

struct ModelEmaOptions {
  double decay = kModelEmaDecay;  // per update, in [0, 1]: already adjusted (ema_decay_for)
  int64_t steps = 32;         // --model-ema-steps: update after iterations 0, steps, 2*steps, ... of an epoch
  int64_t warmup_epochs = 0;  // --lr-warmup-epochs: epochs whose updates copy (n_averaged reset after each)
};

class ModelEma {
 public:
  // model: the live model's tensors (its state_dict(), or named_parameters() followed by
  // named_buffers()); ema: the EMA model's, the same names in the same order, each with the
  // same dtype (f32, f64 or i64), shape, device and memory format, and its own storage.
  // Copies model into ema (AveragedModel's deepcopy); n_averaged() starts at 0. Throws
  // rt::Error naming the first tensor that does not fit. Both lists' handles are kept:
  // Module::to moves keep them valid, but both models must then stay on one device.
  ModelEma(nn::NamedTensors model, nn::NamedTensors ema, const ModelEmaOptions& opt);

  // torchvision's train_one_epoch, after the optimizer step of iteration `iteration`
  // (0-based within the epoch) of epoch `epoch` (0-based, counted from the run's start, not
  // the resume): update() when iteration % steps == 0, then reset_count() while
  // epoch < warmup_epochs (so the warmup's updates keep copying). Returns whether it
  // updated. Called for every iteration, also one whose step the GradScaler skipped (as
  // torchvision does).
  bool after_optimizer_step(int64_t epoch, int64_t iteration);

  // AveragedModel.update_parameters: every EMA tensor becomes a copy of the model's while
  // n_averaged() == 0, else decay * avg + (1 - decay) * p (Note [EMA rounding]); then
  // n_averaged() += 1. CUDA tensors: fused launches on the current stream, no host sync.
  void update();
  int64_t n_averaged() const { return n_averaged_; }
  void reset_count() { n_averaged_ = 0; }  // n_averaged.fill_(0)

  const nn::NamedTensors& averaged() const { return ema_; }  // the EMA model's tensors
  const ModelEmaOptions& options() const { return opt_; }

  // For the checkpoint: AveragedModel's state_dict: "module.<name>" (a copy of each EMA
  // tensor, on its device) and "n_averaged" (i64, 0-D, on the CPU). load_state() needs
  // exactly these keys; it checks every entry (shape; floating stays floating, integer
  // integer) before changing anything, then copies them in (another float dtype converts;
  // a bit-identical resume needs the same dtype).
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state);

 private:
  void check_pairs() const;  // dtype, device, format of each pair still agree

  nn::NamedTensors model_, ema_;
  ModelEmaOptions opt_;
  cuda::MultiTensorTable tables_[3];  // the f32, f64 and i64 lists on the device
  int64_t n_averaged_ = 0;
};

}  // namespace rt::optim
