// What SGD and LARS share: one momentum buffer per parameter, made at the parameter's first
// step with a gradient and saved as "momentum_buffer.<param name>" (torch.optim.SGD's key),
// and their CUDA updates' reading of the device lr and the skip flag.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"
#include "optim/optimizer.h"
#include "optim/param_util.h"

namespace rt::optim {

class MomentumOptimizer : public Optimizer {
 public:
  bool takes_device_lr() const override { return true; }
  // Once a parameter's buffer exists a skipped step leaves the host side right
  // (Note [Skipping an update on the device]); make_buffer refuses to make one under a flag.
  bool takes_skip_flag() const override { return true; }

  std::map<std::string, Tensor> state() const override { return buffers_state(kMomentumBuffer, params_, buffers_); }
  // A parameter without a saved buffer starts afresh, as when it never stepped.
  void load_state(const std::map<std::string, Tensor>& state) override {
    buffers_ = restore_buffers(state, kMomentumBuffer, params_, who_, refuse_saved_);
  }

 protected:
  // `refuse_saved`, when given, says why load_state takes no buffer (SGD without momentum).
  MomentumOptimizer(nn::NamedTensors params, double lr, const char* who, const char* refuse_saved = nullptr)
      : Optimizer(std::move(params), lr), buffers_(params_.size()), who_(who), refuse_saved_(refuse_saved) {}

  // Makes parameter i's buffer when it has none (zeros, or uninitialised for an update that
  // writes it whole on its first step) and says whether it did; refuses, with a skip flag set,
  // to make one for a CUDA parameter (check_state_before_skip).
  bool make_buffer(size_t i, const Tensor& p, bool zeros) {
    const bool first = !buffers_[i].defined();
    check_state_before_skip(params_[i].first, p, !first, who_);
    if (first)
      buffers_[i] = zeros ? Tensor::zeros(p.shape(), p.dtype(), p.device(), p.format())
                          : Tensor::empty(p.shape(), p.dtype(), p.device(), p.format());
    return first;
  }

  std::vector<Tensor> buffers_;  // per parameter; undefined until its first momentum step

 private:
  inline static const std::string kMomentumBuffer = "momentum_buffer";
  const char* who_;
  const char* refuse_saved_;
};

}  // namespace rt::optim
