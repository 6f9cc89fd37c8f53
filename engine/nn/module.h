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

 protected:
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
