// Modules: named parameters and buffers in PyTorch's state_dict order (a module's own
// parameters, then its own buffers, then each child's, depth first), a training flag, and
// device placement that keeps every Tensor handle valid (optimizers hold them).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace rt::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  NamedTensors state_dict() const;  // parameters and buffers, PyTorch's order and names
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  // The parameters that mixed precision computes with in the compute dtype
  // (Note [Compute copies], engine/nn/compute_copies.h): all but those of modules that keep
  // the master dtype (batch norm).
  NamedTensors compute_parameters() const;

  // Moves every parameter and buffer to `d` in place (handles stay valid); 4-D floating
  // tensors (conv weights) take `format`.
  void to(Device d, MemoryFormat format = MemoryFormat::contiguous);
  // Converts every floating parameter and buffer to `t` in place (f64 for exact checks).
  void to(DType t);

  // How a state dict fits the model. Dtypes convert only where PyTorch's param.copy_(input)
  // would and it is safe: between floating dtypes (f16 -> f32, ...) and between integer
  // dtypes (num_batches_tracked); floating <-> integer is refused (`wrong_kind`).
  struct LoadReport {
    std::vector<std::string> missing;     // in the model, not in the file
    std::vector<std::string> unexpected;  // in the file, not in the model
    std::vector<std::string> mismatched;  // in both, another shape: "key: [a, b] in the file, [c, d] in the model"
    std::vector<std::string> wrong_kind;  // "key: i64 in the file, f32 in the model"
    std::map<std::pair<DType, DType>, int64_t> converted;  // (file dtype, model dtype) -> tensors
    bool exact() const { return missing.empty() && unexpected.empty() && mismatched.empty() && wrong_kind.empty(); }
    // Every problem, `limit` keys per kind then "... and N more" (long keys clipped).
    std::string problems(size_t limit = 10) const;
    // "converted 62 tensors from f16 to f32" per dtype pair, "; "-separated ("" for none).
    std::string conversions() const;
  };
  // How `state` fits the model; changes nothing.
  LoadReport match_state_dict(const std::map<std::string, Tensor>& state) const;
  // Copies `state` into the model (converting dtype as above, device and layout).
  // strict (PyTorch's default): anything but an exact fit throws rt::Error listing every
  // problem, and the model is unchanged. Non-strict: copies the entries that fit in name
  // and shape, skips the rest and reports them (fine-tuning with a new head); a
  // floating/integer mix-up is an error in both modes.
  LoadReport load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // From now on every layer of this module tree computes with copies.at(p) in place of each
  // parameter p listed (keyed by p's TensorImpl); an empty map goes back to the parameters
  // themselves. ComputeCopies (engine/nn/compute_copies.h) is the one user.
  void bind_compute_copies(const std::map<const TensorImpl*, Tensor>& copies);

  // f(m) for this module and every descendant, depth first, each before its children.
  void for_each_module(const std::function<void(Module&)>& f);
  // This module ("") and every descendant with its dotted path ("layer3.1.conv2"), in
  // for_each_module's order, like torch.nn.Module.named_modules().
  std::vector<std::pair<std::string, Module*>> named_modules();

 protected:
  // What forward computes with for parameter `p` (or an undefined tensor): its bound
  // working copy when there is one, else `p`.
  Tensor compute(const Tensor& p) const;
  // True for modules whose parameters stay in the master dtype under mixed precision.
  virtual bool keeps_master_dtype() const { return false; }

  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, bool params, bool buffers, NamedTensors& out) const;

  NamedTensors params_, buffers_;
  std::vector<Tensor> copies_;  // bound working copies, parallel to params_ (empty: none)
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Runs children in order; its children are named "0", "1", ... like torch.nn.Sequential.
class Sequential : public Module {
 public:
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Module>& at(size_t i) const { return layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

// Registers every module of `root`'s tree with the profiler under its path (the root as
// "model"), so the ops inside each layer's forward (prof::ModuleScope) and their backward
// are attributed to it and NVTX shows the model's structure.
void name_modules_for_profiling(Module& root);

}  // namespace rt::nn
