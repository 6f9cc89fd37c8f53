#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string_view>

#include "engine/autograd.h"
#include "optim/param_util.h"

namespace rt::optim {

void Optimizer::zero_grad() {
  // Dropping the gradient (PyTorch's set_to_none=True) rather than filling it with
  // zeros: the next backward writes it anew, and skipped parameters stay skipped.
  for (const auto& [name, p] : params_) p.zero_grad();
}

void Optimizer::set_device_lr(Tensor lr) {
  if (lr.defined()) {
    RT_CHECK(takes_device_lr(), "set_device_lr: this optimizer takes no learning rate from device memory; pass lr() "
             "instead");
    RT_CHECK(lr.device().is_cuda() && lr.dtype() == DType::f64 && lr.numel() == 1,
             "set_device_lr: the learning rate must be one f64 value on a CUDA device, got ", lr.str());
  }
  device_lr_ = std::move(lr);
}

void Optimizer::set_skip_flag(Tensor flag) {
  if (flag.defined()) {
    RT_CHECK(takes_skip_flag(), "set_skip_flag: this optimizer cannot skip an update on the device: what it keeps "
             "on the host would be wrong after a skipped step (Note [Skipping an update on the device])");
    RT_CHECK(flag.device().is_cuda() && flag.dtype() == DType::f32 && flag.numel() == 1,
             "set_skip_flag: the flag must be one f32 value on a CUDA device, got ", flag.str());
  }
  skip_flag_ = std::move(flag);
}

void Optimizer::check_state_before_skip(const std::string& name, const Tensor& p, bool has_state,
                                        const char* who) const {
  RT_CHECK(has_state || !skip_flag_.defined() || !p.device().is_cuda(), who, ": '", name,
           "' has no state yet, and its first step with a skip flag set would make it whether or not the device "
           "skips the step (Note [Skipping an update on the device]): step once without a flag first");
}

void check_param_list(const nn::NamedTensors& params, const char* who) {
  RT_CHECK(!params.empty(), who, ": got an empty parameter list (expected the model's named_parameters())");
  std::set<std::string> names;
  std::set<const TensorImpl*> seen;
  for (const auto& [name, p] : params) {
    RT_CHECK(!name.empty(), who, ": a parameter has an empty name (names key the optimizer state)");
    RT_CHECK(p.defined(), who, ": parameter '", name, "' is an undefined tensor");
    RT_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, who, ": parameter '", name, "' is ",
             dtype_name(p.dtype()), "; expected f32 or f64 (keep fp32 master weights for mixed precision)");
    RT_CHECK(names.insert(name).second, who, ": parameter name '", name, "' is listed twice");
    RT_CHECK(seen.insert(p.impl_ptr().get()).second, who, ": parameter '", name,
             "' is the same tensor as an earlier parameter (it would be updated twice per step)");
  }
}

std::vector<Tensor> grads_for_step(const nn::NamedTensors& params, double lr, const char* who) {
  check_non_negative(lr, "lr", who);
  std::vector<Tensor> grads(params.size());
  for (size_t i = 0; i < params.size(); ++i) grads[i] = grad_for_update(params[i].first, params[i].second, who);
  return grads;
}

Tensor grad_for_update(const std::string& name, const Tensor& param, const char* who) {
  Tensor g = param.grad();
  if (!g.defined()) return g;
  RT_CHECK(g.dtype() == param.dtype(), who, ": the gradient of '", name, "' is ", dtype_name(g.dtype()),
           " but the parameter is ", dtype_name(param.dtype()));
  RT_CHECK(g.device() == param.device(), who, ": the gradient of '", name, "' is on ", g.device().str(),
           " but the parameter is on ", param.device().str());
  RT_CHECK(g.shape() == param.shape(), who, ": the gradient of '", name, "' has shape ", shape_str(g.shape()),
           " but the parameter has shape ", shape_str(param.shape()));
  return g.to(param.format());
}

prof::OpCost update_cost(const nn::NamedTensors& params, double flops, int tensors) {
  double n = 0, bytes = 0;
  for (const auto& [name, p] : params) {
    n += double(p.numel());
    bytes += double(p.nbytes());
  }
  return {{flops * n, tensors * bytes}, {}};
}

void check_non_negative(double value, const char* what, const char* who) {
  RT_CHECK(std::isfinite(value) && value >= 0.0, who, ": ", what, " must be a finite number >= 0, got ", value);
}

std::map<std::string, Tensor> buffers_state(const std::string& kind, const nn::NamedTensors& params,
                                            const std::vector<Tensor>& buffers) {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params.size(); ++i)
    if (buffers[i].defined()) out[kind + "." + params[i].first] = buffers[i].clone();
  return out;
}

std::vector<Tensor> restore_buffers(const std::map<std::string, Tensor>& state, const std::string& kind,
                                    const nn::NamedTensors& params, const char* who, const char* refuse) {
  StateByParam saved = split_state(state, params, {kind}, who);
  std::vector<Tensor> restored(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = saved[kind][i];
    if (!t.defined()) continue;  // never stepped with a gradient: starts afresh, like PyTorch
    const std::string key = kind + "." + params[i].first;
    RT_CHECK(refuse == nullptr, who, ": state entry '", key, "' ", refuse ? refuse : "");
    restored[i] = restore_buffer(t, key, params[i].second, who);
  }
  return restored;
}

double decay_of(const nn::NamedTensors& params, size_t i, double weight_decay, bool no_decay_1d,
                const std::map<std::string, double>& by_name) {
  if (no_decay_1d && params[i].second.ndim() <= 1) return 0.0;
  const auto it = by_name.find(params[i].first);
  return it == by_name.end() ? weight_decay : it->second;
}

void check_decay_by_name(const std::map<std::string, double>& by_name, const nn::NamedTensors& params,
                         const char* who) {
  for (const auto& [name, decay] : by_name) {
    const bool known = std::any_of(params.begin(), params.end(), [&](const auto& p) { return p.first == name; });
    RT_CHECK(known, who, ": weight_decay_of names '", name, "', which is not one of its parameters");
    RT_CHECK(std::isfinite(decay) && decay >= 0.0, who, ": the weight decay of '", name,
             "' must be a finite number >= 0, got ", decay);
  }
}

StateByParam split_state(const std::map<std::string, Tensor>& state, const nn::NamedTensors& params,
                         const std::vector<std::string>& kinds, const char* who) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].first] = i;
  StateByParam out;
  for (const std::string& k : kinds) out[k].resize(params.size());

  std::string accepted;
  for (const std::string& k : kinds) accepted += (accepted.empty() ? "" : ", ") + k + ".<param>";
  for (const auto& [key, t] : state) {
    // Parameter names contain dots ("layer1.0.conv1.weight"); kinds do not.
    const size_t dot = key.find('.');
    const std::string kind = dot == std::string::npos ? key : key.substr(0, dot);
    auto slot = out.find(kind);
    RT_CHECK(dot != std::string::npos && slot != out.end(), who, ": unexpected state entry '", key,
             "'; expected keys ", accepted);
    const std::string name = key.substr(dot + 1);
    auto it = index.find(name);
    RT_CHECK(it != index.end(), who, ": state entry '", key, "' names no parameter of this optimizer ('", name,
             "'); was the state saved for a different model?");
    RT_CHECK(t.defined(), who, ": state entry '", key, "' is an undefined tensor");
    slot->second[it->second] = t;
  }
  return out;
}

Tensor restore_buffer(const Tensor& saved, const std::string& key, const Tensor& param, const char* who) {
  RT_CHECK(saved.dtype() == DType::f32 || saved.dtype() == DType::f64, who, ": state entry '", key, "' is ",
           dtype_name(saved.dtype()), "; expected f32 or f64");
  RT_CHECK(saved.shape() == param.shape(), who, ": state entry '", key, "' has shape ", shape_str(saved.shape()),
           " but the parameter has shape ", shape_str(param.shape()));
  Tensor t = Tensor::empty(param.shape(), param.dtype(), param.device(), param.format());
  t.copy_(saved);
  return t;
}

}  // namespace rt::optim
