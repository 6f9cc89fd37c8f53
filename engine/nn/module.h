// Modules: named parameters and buffers in PyTorch's state_dict order (a module's own
// parameters, then its own buffers, then each child's, depth first), a training flag, and
// device placement that keeps every Tensor handle valid (optimizers hold them).
#pragma once

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
  // The parameters that mixed precision computes with in the compute dtype (Note [Compute
  // copies], engine/nn/compute_copies.h): all but those of modules that keep the master
  // dtype (batch norm).
  NamedTensors compute_parameters() const;

  // Moves every parameter and buffer to `d` in place (handles stay valid); 4-D floating
  // tensors (conv weights) take `format`.
  void to(Device d, MemoryFormat format = MemoryFormat::contiguous);
  // Converts every floating parameter and buffer to `t` in place (f64 for exact checks).
  void to(DType t);

  struct LoadReport {
    std::vector<std::string> missing;     // in the model, not in the file
    std::vector<std::string> unexpected;  // in the file, not in the model
  };
  // Copies matching entries into the model (converting dtype, device and layout). A shape
  // mismatch is an error naming the key and both shapes.
  LoadReport load_state_dict(const std::map<std::string, Tensor>& state);

  // From now on every layer of this module tree computes with copies.at(p) in place of each
  // parameter p listed (keyed by p's TensorImpl); an empty map goes back to the parameters
  // themselves. ComputeCopies (engine/nn/compute_copies.h) is the one user.
  void bind_compute_copies(const std::map<const TensorImpl*, Tensor>& copies);

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

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace rt::nn
