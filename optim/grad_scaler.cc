// GradScaler: PyTorch's _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_
// on the host side. The inverse scale is computed as PyTorch does
// (scale.double().reciprocal().float()) and gradients are multiplied by it in float
// (double for f64 gradients).
#include "optim/grad_scaler.h"

#include <cmath>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cuda/loss_scale.cuh"

namespace rt::optim {
namespace {

constexpr const char* kWho = "GradScaler";

template <typename T>
bool unscale_cpu(T* g, int64_t n, float inv_scale) {
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    bad |= !std::isfinite(g[i]);
    if (inv_scale != 1.0f) g[i] = g[i] * T(inv_scale);
  }
  return bad;
}

}  // namespace

GradScaler::GradScaler(const GradScalerOptions& opt) : opt_(opt), scale_(float(opt.init_scale)) {
  RT_CHECK(std::isfinite(opt.init_scale) && opt.init_scale > 0.0, kWho, ": init_scale must be finite and > 0, got ",
           opt.init_scale);
  RT_CHECK(opt.growth_factor > 1.0, kWho, ": growth_factor must be > 1, got ", opt.growth_factor);
  RT_CHECK(opt.backoff_factor > 0.0 && opt.backoff_factor < 1.0, kWho, ": backoff_factor must be in (0, 1), got ",
           opt.backoff_factor);
  RT_CHECK(opt.growth_interval > 0, kWho, ": growth_interval must be > 0, got ", opt.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const { return mul(loss, double(scale_)); }

bool GradScaler::unscale(Optimizer& opt) {
  RT_CHECK(!unscaled_, kWho, ": unscale() already ran since the last update()");
  NoGradGuard no_grad;
  const float inv_scale = float(1.0 / double(scale_));
  bool found = false;
  // CUDA gradients by dtype, checked by one flag on the device read once below.
  std::vector<void*> cuda_grads[2];
  std::vector<int64_t> cuda_n[2];
  Device cuda_dev = Device::cpu();
  for (const auto& [name, p] : opt.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    RT_CHECK(g.dtype() == DType::f32 || g.dtype() == DType::f64, kWho, ": the gradient of '", name, "' is ",
             dtype_name(g.dtype()), "; expected f32 or f64");
    if (g.device().is_cuda()) {
      const int k = g.dtype() == DType::f32 ? 0 : 1;
      cuda_grads[k].push_back(g.raw_data());
      cuda_n[k].push_back(g.numel());
      cuda_dev = g.device();
    } else if (g.dtype() == DType::f32) {
      found |= unscale_cpu(g.data<float>(), g.numel(), inv_scale);
    } else {
      found |= unscale_cpu(g.data<double>(), g.numel(), inv_scale);
    }
  }
  if (cuda_dev.is_cuda()) {
    Tensor flag = Tensor::zeros({1}, DType::f32, cuda_dev);
    const auto s = static_cast<cudaStream_t>(Stream::current(cuda_dev).handle());
    cuda::unscale_and_check(DType::f32, cuda_grads[0], cuda_n[0], inv_scale, flag.data<float>(), tables_[0], s);
    cuda::unscale_and_check(DType::f64, cuda_grads[1], cuda_n[1], inv_scale, flag.data<float>(), tables_[1], s);
    found |= flag.item() != 0.0;  // the one device-to-host read of the step
  }
  unscaled_ = true;
  found_inf_ = found;
  return found;
}

bool GradScaler::step(Optimizer& opt) {
  if (!unscaled_) unscale(opt);
  if (found_inf_) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  RT_CHECK(unscaled_, kWho, ": update() needs a step() or unscale() first");
  if (found_inf_) {
    scale_ = scale_ * float(opt_.backoff_factor);
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == opt_.growth_interval) {
    const float grown = scale_ * float(opt_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

std::map<std::string, Tensor> GradScaler::state() const {
  RT_CHECK(!unscaled_, kWho, ": state() between unscale() and update(): the step is half done");
  return {{"scale", Tensor::scalar(double(scale_), DType::f32)},
          {"growth_tracker", Tensor::scalar(double(growth_tracker_), DType::i64)}};
}

void GradScaler::load_state(const std::map<std::string, Tensor>& state) {
  RT_CHECK(!unscaled_, kWho, ": load_state() between unscale() and update(): the step is half done");
  for (const auto& [k, t] : state)
    RT_CHECK(k == "scale" || k == "growth_tracker", kWho, ": unexpected state entry '", k,
             "'; expected scale and growth_tracker");
  auto get = [&](const char* key) {
    auto it = state.find(key);
    RT_CHECK(it != state.end(), kWho, ": the state has no '", key, "' entry");
    RT_CHECK(it->second.defined() && it->second.numel() == 1, kWho, ": state entry '", key,
             "' must hold one value, got ", it->second.defined() ? it->second.str() : "an undefined tensor");
    return it->second.item();
  };
  const double scale = get("scale"), tracker = get("growth_tracker");
  RT_CHECK(std::isfinite(scale) && scale > 0.0, kWho, ": the saved scale must be finite and > 0, got ", scale);
  RT_CHECK(tracker >= 0 && tracker < opt_.growth_interval && tracker == std::floor(tracker), kWho,
           ": the saved growth_tracker must be an integer in [0, ", opt_.growth_interval, "), got ", tracker);
  scale_ = float(scale);
  growth_tracker_ = int(tracker);
}

}  // namespace rt::optim
