// NaN and Inf in training: finding them (before a checkpoint is written, after a step with
// --skip-nonfinite, in an input batch) and what a skipped step restores.
//
// Note [Non-finite steps]
// Without --skip-nonfinite a non-finite loss stops training with its cause (the input
// batch, weights that were already non-finite, or divergence), and a checkpoint holding
// NaN/Inf is never written (save_checkpoint checks). With it, a step is skipped when its
// loss, a gradient, or the state after the update (parameters, buffers, optimizer state) is
// non-finite: the state is put back to a snapshot taken before the step, so the skipped
// step changes nothing but the step counter (the schedule moves on, as with PyTorch's
// GradScaler). fp16's loss scaler keeps its own rule for gradients: an overflow there skips
// the step and backs off the scale (train/precision.h).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "engine/nn/module.h"
#include "optim/optimizer.h"
#include "train/precision.h"

namespace rt::train {

// The name of the first tensor holding a NaN or Inf, nullopt when all are finite (integer
// tensors always are). CUDA tensors are checked on the device with loss scaling's kernel
// (kernels/cuda/loss_scale.h with a scale of 1: check only), one launch per dtype and a
// single read of the result; only when it finds something are tensors copied to the host,
// one by one, to name the culprit.
std::optional<std::string> first_nonfinite(const nn::NamedTensors& tensors);
bool is_finite(const Tensor& t);

// The gradients of the optimizer's parameters, named like them (those that have one).
nn::NamedTensors gradients(const optim::Optimizer& opt);

// Everything a step changes besides the gradients: copies of the model's parameters and
// buffers, the optimizer state and the loss scaler's. --skip-nonfinite takes one after each
// step that stands and restores it when a step is skipped.
struct TrainState {
  nn::NamedTensors model;  // "model.<key>", clones
  std::map<std::string, Tensor> optimizer, scaler;

  static TrainState take(const nn::Module& model, const optim::Optimizer& opt, const MixedPrecision& mp);
  void restore(nn::Module& model, optim::Optimizer& opt, MixedPrecision& mp) const;
  std::optional<std::string> first_nonfinite() const;
};

// Why a step's loss is NaN/Inf, and what to do, for the message: the input batch holds
// NaN/Inf; or a parameter already does (`diverged_here`: an earlier step of this process
// made it so, else it came from --init-weights/--resume); or both are finite and the
// computation overflowed. `skipping`: --skip-nonfinite is on (not suggested again).
std::string nonfinite_loss_cause(const Tensor& input, const nn::Module& model, bool diverged_here, bool skipping);

}  // namespace rt::train
