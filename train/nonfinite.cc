#include "train/nonfinite.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/stream.h"
#include "kernels/cuda/loss_scale.h"

namespace rt::train {
namespace {

template <typename T>
bool all_finite(const T* p, int64_t n) {
  bool bad = false;  // no early exit: the loop vectorises
  for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(p[i]);
  return !bad;
}

bool host_finite(const Tensor& cpu) {
  switch (cpu.dtype()) {
    case DType::f32: return all_finite(cpu.data<float>(), cpu.numel());
    case DType::f64: return all_finite(cpu.data<double>(), cpu.numel());
    case DType::bf16:
    case DType::f16: return host_finite(cpu.to(DType::f32));
    default: return true;  // integers
  }
}

// The checks' lists on the device, one per device and dtype, kept for the process
// (Note [Leaked handles] in kernels/cuda/cudnn_conv.cu): --skip-nonfinite checks twice a
// step, and a table per call would allocate device and pinned memory every time.
struct CheckTables {
  std::mutex mu;
  std::map<std::pair<int, DType>, cuda::MultiTensorTable> by;
};
CheckTables& check_tables() {
  static auto* t = new CheckTables;
  return *t;
}

// One device pass over every floating CUDA tensor of `tensors` on `device`: whether any
// element is NaN or Inf.
bool cuda_any_nonfinite(const nn::NamedTensors& tensors, Device device) {
  CheckTables& tables = check_tables();
  std::lock_guard<std::mutex> lock(tables.mu);
  Tensor flag = Tensor::zeros({1}, DType::f32, device);
  const auto stream = static_cast<cudaStream_t>(Stream::current(device).handle());
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    std::vector<void*> ptrs;
    std::vector<int64_t> n;
    for (const auto& [name, x] : tensors)
      if (x.device() == device && x.dtype() == t && x.numel() > 0) {
        ptrs.push_back(x.raw_data());
        n.push_back(x.numel());
      }
    // inv_scale 1: the kernel only checks (it multiplies only when the scale is not 1).
    if (!ptrs.empty())
      cuda::unscale_and_check(t, ptrs, n, 1.0f, nullptr, flag.data<float>(), tables.by[{device.index, t}], stream);
  }
  return flag.item() != 0.0;
}

}  // namespace

bool is_finite(const Tensor& t) {
  if (!is_floating(t.dtype())) return true;
  if (t.device().is_cuda()) return !cuda_any_nonfinite({{"", t}}, t.device());
  return host_finite(t);
}

std::optional<std::string> first_nonfinite(const nn::NamedTensors& tensors) {
  std::vector<Device> devices;  // the CUDA devices present, each checked in one pass
  for (const auto& [name, t] : tensors) {
    if (!is_floating(t.dtype())) continue;
    if (t.device().is_cuda()) {
      if (std::find(devices.begin(), devices.end(), t.device()) == devices.end()) devices.push_back(t.device());
    } else if (!host_finite(t)) {
      return name;
    }
  }
  for (Device d : devices) {
    if (!cuda_any_nonfinite(tensors, d)) continue;
    for (const auto& [name, t] : tensors)  // rare: name the culprit
      if (t.device() == d && !host_finite(t.to(Device::cpu()))) return name;
  }
  return std::nullopt;
}

nn::NamedTensors gradients(const optim::Optimizer& opt) {
  nn::NamedTensors out;
  for (const auto& [name, p] : opt.params())
    if (p.grad().defined()) out.emplace_back(name, p.grad());
  return out;
}

TrainState TrainState::take(const nn::Module& model, const optim::Optimizer& opt, const MixedPrecision& mp) {
  NoGradGuard ng;
  TrainState s;
  for (const auto& [k, t] : model.state_dict()) s.model.emplace_back("model." + k, t.clone());
  s.optimizer = opt.state();  // already copies
  s.scaler = mp.state();
  return s;
}

void TrainState::restore(nn::Module& model, optim::Optimizer& opt, MixedPrecision& mp) const {
  NoGradGuard ng;
  const nn::NamedTensors live = model.state_dict();
  RT_CHECK(live.size() == this->model.size(), "TrainState::restore: the model has ", live.size(),
           " tensors but the snapshot ", this->model.size());
  for (size_t i = 0; i < live.size(); ++i) {
    Tensor t = live[i].second;
    t.copy_(this->model[i].second);
  }
  opt.load_state(optimizer);
  mp.load_state(scaler);
}

std::optional<std::string> TrainState::first_nonfinite() const {
  nn::NamedTensors all = model;
  for (const auto& [k, t] : optimizer) all.emplace_back("optimizer." + k, t);
  for (const auto& [k, t] : scaler) all.emplace_back("grad_scaler." + k, t);
  return train::first_nonfinite(all);
}

std::string nonfinite_loss_cause(const Tensor& input, const nn::Module& model, bool diverged_here, bool skipping) {
  const std::string skip = skipping ? "" : ", or pass --skip-nonfinite to skip such steps";
  if (!is_finite(input))
    return "the input batch holds NaN or Inf: the dataset (--data-path) has non-finite values; fix the data" +
           std::string(skipping ? "" : " (--skip-nonfinite skips such batches)");
  // Parameters only: this step's forward has already updated the batch-norm statistics.
  if (const auto bad = first_nonfinite(model.named_parameters())) {
    if (diverged_here)
      return "'" + *bad + "' became NaN or Inf in an earlier step: training diverged. Lower --lr, add " +
             "--lr-warmup-epochs" + skip;
    return "the weights hold NaN or Inf before the first step ('" + *bad +
           "'): the --init-weights or --resume file holds them";
  }
  return "the input and the weights are finite but the loss overflowed: training diverged. Lower --lr or add "
         "--lr-warmup-epochs" + skip;
}

}  // namespace rt::train
