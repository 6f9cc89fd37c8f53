// Optimizers with PyTorch's update rules (torch.optim.SGD, torch.optim.AdamW), LARS with the
// rule of MLPerf's ResNet50 reference, and their state for checkpoints.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"

namespace rt::optim {

// A weight decay per parameter name that replaces `weight_decay` for it: torchvision's
// set_weight_decay groups (--norm-weight-decay, --bias-weight-decay). Every name must be one
// of the optimizer's parameters, every value finite and >= 0 (make_* checks).
using DecayByName = std::map<std::string, double>;

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  // Parameters with ndim <= 1 (batch-norm weights and biases, every bias) get no weight
  // decay when set: torchvision's --norm-weight-decay 0 / --bias-weight-decay 0.
  bool no_decay_1d = false;
  DecayByName weight_decay_of;
};

// LARS as MLPerf's ResNet50 reference runs it (TensorFlow's LARSOptimizer with eeta 0.001,
// epsilon 0 and the batch-norm parameters and biases in its skip list). For a parameter w
// with gradient g (every operation in the parameter's dtype except the trust ratio, which
// is computed in double from norms accumulated in double on the CPU, in the dtype on CUDA):
//   trust_ratio = ||w|| > 0 && ||g|| > 0 ? eta * ||w|| / (||g|| + weight_decay * ||w|| + epsilon) : 1
//   scaled_lr   = lr * trust_ratio
//   v = momentum * v + scaled_lr * (g + weight_decay * w)        (v starts at zero)
//   w = w - v     (nesterov: w = w - (momentum * v + scaled_lr * (g + weight_decay * w)))
// and for a parameter excluded by exclude_bn_bias (ndim <= 1) no trust ratio and no decay:
//   v = momentum * v + lr * g;  w = w - v   (nesterov: w = w - (momentum * v + lr * g)).
//
// Note [LARS keeps the lr inside the velocity]
// Unlike torch.optim.SGD (v = momentum * v + g; w -= lr * v), the velocity here already
// holds the learning rate of the steps that built it, as in TensorFlow's apply_momentum
// with lr 1 and a pre-scaled gradient. When the schedule changes the lr, the momentum
// carried from earlier steps keeps its old lr and only the new term uses the new one, so
// a warmup or decay acts gradually instead of rescaling the whole velocity at once; the
// two conventions agree only for a constant lr. Resuming therefore needs the saved
// momentum buffers ("momentum_buffer.<param name>") and the schedule's lr of the next
// step, nothing else.
struct LarsOptions {
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 5e-5;  // MLPerf ResNet50's
  double eta = 0.001;          // the trust coefficient (TensorFlow's eeta)
  double epsilon = 0.0;
  bool nesterov = false;
  // Parameters with ndim <= 1 (batch-norm weights and biases, every bias) skip the trust
  // ratio and the weight decay: MLPerf's skip list.
  bool exclude_bn_bias = true;
  DecayByName weight_decay_of;  // for the parameters LARS adapts
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool no_decay_1d = false;
  DecayByName weight_decay_of;
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

  // Note [The learning rate in device memory]
  // A captured training step (--cuda-graphs) replays its kernels with the arguments they had
  // at capture, the learning rate among them. With a device lr set, the CUDA updates read the
  // learning rate from that (1,) f64 tensor when they run instead: the caller writes lr()
  // there before each step (Tensor::fill_, a launch on the step's stream with the value as its
  // argument, so nothing waits), and a schedule that changes lr every step (cosine, poly, a
  // warm-up) replays one graph. The kernels compute with the same double either way: the same
  // bits. SGD, LARS and AdamW take one (takes_device_lr(); AdamW through its own scalars,
  // prepare_device_step below). CPU parameters ignore it.
  virtual bool takes_device_lr() const { return false; }
  // lr: (1,) f64 on a CUDA device, or undefined to pass lr() as an argument again.
  void set_device_lr(Tensor lr);
  const Tensor& device_lr() const { return device_lr_; }
  // While a device lr is set, the caller also calls prepare_device_step() before every step
  // (after writing the lr, on the step's stream): what else the coming step's CUDA updates
  // read from device memory is written there (AdamW: Note [AdamW's scalars in device memory]
  // in optim/adamw.cc). And after a replayed step, whose update ran without step() on the
  // host, count_replayed_step() advances what step() keeps on the host (AdamW's step counts).
  virtual void prepare_device_step() {}
  virtual void count_replayed_step() {}

  // Note [Skipping an update on the device]
  // fp16's loss scaler lets a step stand only when every gradient is finite. In a captured
  // step the host cannot read that finding, so the scaler sets a skip flag instead
  // (Note [Loss scaling in a captured step] in optim/grad_scaler.cc): the CUDA updates read that (1,) f32
  // tensor when they run and change nothing (parameters, state, copies) when it is non-zero.
  // What step() does on the host happens either way, so only an optimizer whose host side a
  // skipped step leaves right takes one (takes_skip_flag()): SGD once its momentum buffers
  // exist (a first momentum step makes a buffer from the gradient: step() refuses it with a
  // flag set), LARS (its buffers start at zero) and AdamW once its moments exist, whose host
  // step counts learn from the device which steps it skipped
  // (Note [AdamW's skipped steps in a captured step] in optim/adamw.cc). CPU parameters ignore it.
  virtual bool takes_skip_flag() const { return false; }
  // flag: (1,) f32 on a CUDA device, or undefined for none.
  void set_skip_flag(Tensor flag);
  const Tensor& skip_flag() const { return skip_flag_; }

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
  // The device lr's address for the CUDA updates, or null (Note [The learning rate in device memory]).
  const double* device_lr_ptr() const { return device_lr_.defined() ? device_lr_.data<double>() : nullptr; }
  // The skip flag's address for the CUDA updates, or null (Note [Skipping an update on the device]).
  const float* skip_flag_ptr() const { return skip_flag_.defined() ? skip_flag_.data<float>() : nullptr; }
  // Throws when a skip flag is set and CUDA parameter `name` has no state yet: its first step
  // makes it (from the gradient, or zeros that a captured step would zero again at every
  // replay), which a skipped step must not do (Note [Skipping an update on the device]).
  void check_state_before_skip(const std::string& name, const Tensor& p, bool has_state, const char* who) const;
  nn::NamedTensors params_;
  double lr_;
  Tensor device_lr_;
  Tensor skip_flag_;
};

// Each checks the options and the parameters (f32 or f64, each listed once under a
// unique name) and throw rt::Error naming what is wrong. step() updates CPU parameters with
// optim/update_cpu.cc and CUDA parameters with the fused kernels of kernels/cuda/optim.cu
// (bit-identical results; their state lives on the parameter's device).
std::unique_ptr<Optimizer> make_sgd(nn::NamedTensors params, const SgdOptions& opt);
std::unique_ptr<Optimizer> make_adamw(nn::NamedTensors params, const AdamWOptions& opt);
// LARS's CUDA step runs without a host synchronisation: one multi-tensor kernel writes the
// norms' partial sums to a device buffer and a second fused one updates every parameter
// with the trust ratio it reads from there (kernels/cuda/grad_norm.cu, optim.cu); the
// results match the CPU's within the tolerance of the dtype, not bit for bit (the norms
// are summed in a different order).
std::unique_ptr<Optimizer> make_lars(nn::NamedTensors params, const LarsOptions& opt);

}  // namespace rt::optim
