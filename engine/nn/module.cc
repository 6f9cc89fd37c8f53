#include "engine/nn/module.h"

#include "engine/profiler.h"

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

namespace {

void list(std::string& out, const char* what, const std::vector<std::string>& keys, size_t limit) {
  if (keys.empty()) return;
  out += (out.empty() ? "" : "; ") + std::to_string(keys.size()) + " " + what + ": ";
  // clip_for_message: a damaged file's keys may be megabytes long.
  for (size_t i = 0; i < keys.size() && i < limit; ++i) out += (i ? ", " : "") + clip_for_message(keys[i]);
  if (keys.size() > limit) out += ", ... and " + std::to_string(keys.size() - limit) + " more";
}

}  // namespace

std::string Module::LoadReport::problems(size_t limit) const {
  std::string out;
  list(out, "missing (in the model, not in the file)", missing, limit);
  list(out, "unexpected (in the file, not in the model)", unexpected, limit);
  list(out, "of another shape", mismatched, limit);
  list(out, "of another kind of dtype (floating vs integer)", wrong_kind, limit);
  return out;
}

std::string Module::LoadReport::conversions() const {
  std::string out;
  for (const auto& [dtypes, n] : converted)
    out += (out.empty() ? "" : "; ") + std::string("converted ") + std::to_string(n) + " tensor" + (n == 1 ? "" : "s") +
           " from " + dtype_name(dtypes.first) + " to " + dtype_name(dtypes.second);
  return out;
}

Module::LoadReport Module::match_state_dict(const std::map<std::string, Tensor>& state) const {
  LoadReport r;
  std::set<std::string> seen;
  for (const auto& [name, t] : state_dict()) {
    auto it = state.find(name);
    if (it == state.end()) {
      r.missing.push_back(name);
      continue;
    }
    seen.insert(name);
    const Tensor& src = it->second;
    if (src.shape() != t.shape())
      r.mismatched.push_back(name + ": " + shape_str(src.shape()) + " in the file, " + shape_str(t.shape()) +
                             " in the model");
    else if (is_floating(src.dtype()) != is_floating(t.dtype()))
      r.wrong_kind.push_back(name + ": " + dtype_name(src.dtype()) + " in the file, " + dtype_name(t.dtype()) +
                             " in the model");
    else if (src.dtype() != t.dtype())
      ++r.converted[{src.dtype(), t.dtype()}];
  }
  for (const auto& [name, t] : state)
    if (!seen.count(name)) r.unexpected.push_back(name);
  return r;
}

Module::LoadReport Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  const LoadReport r = match_state_dict(state);
  RT_CHECK(!strict || r.exact(), "the weights do not match the model: ", r.problems());
  RT_CHECK(r.wrong_kind.empty(), "the weights do not match the model: ", r.problems(),
           "; a floating-point tensor does not load into an integer one or back");
  for (auto& [name, t] : state_dict()) {
    auto it = state.find(name);
    if (it != state.end() && it->second.shape() == t.shape()) t.copy_(it->second);
  }
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

void Module::for_each_module(const std::function<void(Module&)>& f) {
  f(*this);
  for (auto& [name, child] : children_) child->for_each_module(f);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [name, child] : children_)
    for (auto& [path, m] : child->named_modules()) out.emplace_back(path.empty() ? name : name + "." + path, m);
  return out;
}

void name_modules_for_profiling(Module& root) {
  for (const auto& [path, m] : root.named_modules()) prof::register_module(m, path);
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
  const prof::ModuleScope scope(this);
  Tensor h = x;
  for (auto& m : layers_) h = m->forward(h);
  return h;
}

}  // namespace rt::nn
