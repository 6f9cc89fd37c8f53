// What the optimizers share: the parameter list's checks, the skeleton of a step (run_step),
// the gradient a step applies, and the "<kind>.<param name>" keys of their saved state.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/nn/module.h"
#include "engine/profiler.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "kernels/cuda/stream.h"

namespace rt::optim {

// Every parameter defined, f32 or f64, named, and listed once (a tensor listed twice
// would be updated twice per step). `who` names the optimizer in errors.
void check_param_list(const nn::NamedTensors& params, const char* who);

// The gradient step() applies to parameter `name`: undefined when it has none (the
// parameter is skipped); else checked against the parameter (dtype, device, shape) and
// in its memory format, relaid when backward produced the other one.
Tensor grad_for_update(const std::string& name, const Tensor& param, const char* who);

// The start of every step(): checks lr, then every parameter's gradient before any
// parameter changes (a bad one must not leave the model half updated). One entry per
// parameter, undefined where it has no gradient.
std::vector<Tensor> grads_for_step(const nn::NamedTensors& params, double lr, const char* who);

// The profiler's cost of one update over every parameter: `flops` per element and
// `tensors` parameter-sized tensors read or written per element (Note [Profiler scopes]).
prof::OpCost update_cost(const nn::NamedTensors& params, double flops, int tensors);

// The CUDA parameters of one step, gathered per dtype for one fused launch per list.
template <typename Entry>
struct CudaUpdates {
  std::vector<Entry> f32, f64;
  const Tensor* any = nullptr;  // picks the stream (one GPU per process)
  void add(const Tensor& p, const Entry& e) {
    (p.dtype() == DType::f32 ? f32 : f64).push_back(e);
    any = &p;
  }
};

// The skeleton of every optimizer's step(): its profiler scope (`flops` and `tensors` per
// element, update_cost), no autograd, every gradient checked before any parameter changes
// (grads_for_step), then for each parameter with a gradient (PyTorch skips those whose grad
// is None) `update(i, param, grad, cuda)`, which updates a CPU parameter at once and adds a
// CUDA one to `cuda`; last `launch(dtype, entries, stream)` for the f32 and the f64 lists,
// when there are CUDA parameters.
template <typename Entry, typename Update, typename Launch>
void run_step(const char* scope_name, const nn::NamedTensors& params, double lr, const char* who, double flops,
              int tensors, Update&& update, Launch&& launch) {
  prof::OpScope scope(scope_name);
  if (scope.active()) scope.describe({}, update_cost(params, flops, tensors));
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = grads_for_step(params, lr, who);
  CudaUpdates<Entry> cuda;
  for (size_t i = 0; i < params.size(); ++i)
    if (grads[i].defined()) update(i, params[i].second, grads[i], cuda);
  if (cuda.any == nullptr) return;
  const auto stream = static_cast<cudaStream_t>(Stream::current(cuda.any->device()).handle());
  launch(DType::f32, cuda.f32, stream);
  launch(DType::f64, cuda.f64, stream);
}

// The weight decay of parameter `i`: none for a 1-D one with `no_decay_1d`, else its
// DecayByName entry, else `weight_decay`.
double decay_of(const nn::NamedTensors& params, size_t i, double weight_decay, bool no_decay_1d,
                const std::map<std::string, double>& by_name);
// Every name of `by_name` is one of `params`, every value finite and >= 0.
void check_decay_by_name(const std::map<std::string, double>& by_name, const nn::NamedTensors& params,
                         const char* who);

// The end of make_sgd, make_lars and make_adamw, once their options are checked: the
// parameter list and the per-name decays checked (errors name `who`), then the optimizer.
template <typename Opt, typename Options>
std::unique_ptr<Opt> make_checked(nn::NamedTensors params, const Options& opt, const char* who) {
  check_param_list(params, who);
  check_decay_by_name(opt.weight_decay_of, params, who);
  return std::make_unique<Opt>(std::move(params), opt);
}

// One buffer per parameter saved as "<kind>.<param name>" (momentum buffers of SGD and
// LARS): buffers_state copies the defined ones; restore_buffers takes them back from a saved
// state, each checked by restore_buffer (and `refuse`, when given, names why this optimizer
// takes none), undefined where there is none; nothing is kept unless every entry checks out.
std::map<std::string, Tensor> buffers_state(const std::string& kind, const nn::NamedTensors& params,
                                            const std::vector<Tensor>& buffers);
std::vector<Tensor> restore_buffers(const std::map<std::string, Tensor>& state, const std::string& kind,
                                    const nn::NamedTensors& params, const char* who, const char* refuse = nullptr);

// Checks a learning rate or option is finite and >= 0 (`what` names it in the error).
void check_non_negative(double value, const char* what, const char* who);

// The entries of a saved state, by parameter index: state[kind][i] is the tensor saved
// under "<kind>.<name of params[i]>", undefined where there is none. Every key must be
// "<kind>.<param name>" with a kind from `kinds` and a parameter of this optimizer;
// anything else is an error naming the key and what is accepted.
using StateByParam = std::map<std::string, std::vector<Tensor>>;
StateByParam split_state(const std::map<std::string, Tensor>& state, const nn::NamedTensors& params,
                         const std::vector<std::string>& kinds, const char* who);

// A saved per-element buffer (momentum, moments) for `param`, checked (floating, same
// shape) and copied into a new tensor with the parameter's dtype, device and format.
Tensor restore_buffer(const Tensor& saved, const std::string& key, const Tensor& param, const char* who);

}  // namespace rt::optim
