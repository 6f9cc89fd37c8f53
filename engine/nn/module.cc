#include "engine/nn/module.h"

#include <functional>
#include <set>

namespace rt::nn {

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::collect(const std::string& prefix, bool params, bool buffers, NamedTensors& out) const {
  if (params)
    for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", params, buffers, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, false, out);
  return out;
}
NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, true, out);
  return out;
}

NamedTensors Module::state_dict() const {
  // PyTorch orders per module: its parameters, its buffers, then its children.
  NamedTensors out;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const auto& [n, t] : m.params_) out.emplace_back(prefix + n, t);
    for (const auto& [n, t] : m.buffers_) out.emplace_back(prefix + n, t);
    for (const auto& [n, child] : m.children_) walk(*child, prefix + n + ".");
  };
  walk(*this, "");
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::to(Device d, MemoryFormat format) {
  for (auto& [name, t] : state_dict()) {
    const MemoryFormat f = t.ndim() == 4 && is_floating(t.dtype()) ? format : t.format();
    if (t.device() == d && t.format() == f) continue;
    const Tensor moved = t.to(f).to(d);
    // Swap the storage under the existing handle: optimizers and hooks keep working.
    TensorImpl& impl = t.impl();
    impl.storage = moved.impl().storage;
    impl.offset = moved.impl().offset;
    impl.format = moved.format();
    if (impl.autograd.grad) impl.autograd.grad = nullptr;
  }
}

void Module::to(DType dt) {
  for (auto& [name, t] : state_dict()) {
    if (!is_floating(t.dtype()) || t.dtype() == dt) continue;
    const Tensor moved = t.to(dt);
    TensorImpl& impl = t.impl();
    impl.storage = moved.impl().storage;
    impl.offset = moved.impl().offset;
    impl.dtype = dt;
    impl.autograd.grad = nullptr;
  }
}

Module::LoadReport Module::load_state_dict(const std::map<std::string, Tensor>& state) {
  LoadReport r;
  std::set<std::string> seen;
  for (auto& [name, t] : state_dict()) {
    auto it = state.find(name);
    if (it == state.end()) {
      r.missing.push_back(name);
      continue;
    }
    seen.insert(name);
    const Tensor& src = it->second;
    RT_CHECK(src.shape() == t.shape(), "weights: '", name, "' has shape ", shape_str(src.shape()),
             " in the file but ", shape_str(t.shape()), " in the model (a different model, width or --num-classes?)");
    t.copy_(src);
  }
  for (auto& [name, t] : state)
    if (!seen.count(name)) r.unexpected.push_back(name);
  return r;
}

NamedTensors Module::compute_parameters() const {
  NamedTensors out;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    if (!m.keeps_master_dtype())
      for (const auto& [n, t] : m.params_) out.emplace_back(prefix + n, t);
    for (const auto& [n, child] : m.children_) walk(*child, prefix + n + ".");
  };
  walk(*this, "");
  return out;
}

void Module::bind_compute_copies(const std::map<const TensorImpl*, Tensor>& copies) {
  copies_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, p] = params_[i];
    auto it = copies.find(p.impl_ptr().get());
    if (it == copies.end()) continue;
    RT_CHECK(it->second.shape() == p.shape(), "bind_compute_copies: the copy of '", name, "' is ", it->second.str(),
             " but the parameter is ", p.str());
    copies_.resize(params_.size());
    copies_[i] = it->second;
  }
  for (auto& [name, child] : children_) child->bind_compute_copies(copies);
}

Tensor Module::compute(const Tensor& p) const {
  for (size_t i = 0; i < copies_.size(); ++i)
    if (params_[i].second.same(p)) return copies_[i].defined() ? copies_[i] : p;
  return p;
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  buffers_.emplace_back(name, t);
  return t;
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : layers_) h = m->forward(h);
  return h;
}

}  // namespace rt::nn
