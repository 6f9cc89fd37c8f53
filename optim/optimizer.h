// Optimizers with PyTorch's update rules (torch.optim.SGD, torch.optim.AdamW) and their
// state for checkpoints.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"

namespace rt::optim {

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  // Parameters with ndim <= 1 (batch-norm weights and biases, every bias) get no weight
  // decay when set: torchvision's --norm-weight-decay 0 / --bias-weight-decay 0.
  bool no_decay_1d = false;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool no_decay_1d = false;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter that has a gradient (parameters without one are
  // skipped, like PyTorch). Runs without recording.
  virtual void step() = 0;
  // Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True)): the next
  // backward writes it anew, and a parameter it does not reach is skipped by step().
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const nn::NamedTensors& params() const { return params_; }

  // Everything step() depends on besides the parameters, by name: "<kind>.<param name>"
  // tensors (e.g. "momentum_buffer.layer1.0.conv1.weight") plus scalars such as the step
  // count as 0-D tensors. load_state() restores it exactly (bit-identical resume).
  // state() is a snapshot (copies); a parameter that never stepped has no entries.
  // load_state() replaces the whole state (parameters without entries start afresh) and
  // checks every entry, names and shapes, before changing anything. Buffers saved in the
  // other float dtype are converted; resuming bit-identically needs the same dtype.
  virtual std::map<std::string, Tensor> state() const = 0;
  virtual void load_state(const std::map<std::string, Tensor>& state) = 0;

 protected:
  explicit Optimizer(nn::NamedTensors params, double lr) : params_(std::move(params)), lr_(lr) {}
  nn::NamedTensors params_;
  double lr_;
};

// Both check the options and the parameters (f32 or f64, each listed once under a
// unique name) and throw rt::Error naming what is wrong. step() updates CPU parameters with
// optim/update_cpu.cc and CUDA parameters with the fused kernels of kernels/cuda/optim.cu
// (bit-identical results; their state lives on the parameter's device).
std::unique_ptr<Optimizer> make_sgd(nn::NamedTensors params, const SgdOptions& opt);
std::unique_ptr<Optimizer> make_adamw(nn::NamedTensors params, const AdamWOptions& opt);

}  // namespace rt::optim
