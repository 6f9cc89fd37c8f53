// GradScaler: PyTorch's _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_
// on the host side. The inverse scale is computed as PyTorch does
// (scale.double().reciprocal().float()) and gradients are multiplied by it in float
// (double for f64 gradients).
#include "optim/grad_scaler.h"

#include <cmath>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cuda/loss_scale.h"
#include "kernels/cuda/runtime.h"

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

// Note [Loss scaling in a captured step]
// A captured training step (--cuda-graphs, Note [The training step as a CUDA graph] in
// train/step.cc) replays without the host, so nothing the host decides per step may be baked
// into it. On CUDA the scaler therefore keeps its state in device memory, as PyTorch's
// capturable GradScaler does:
//   - scale(): the loss times the () f32 scale tensor (a tensor product, not a scalar baked
//     into the kernel): the same bits as loss * scale, the scale being an f32 value;
//   - unscale(): zeroes the found-inf flag, and the unscale kernel takes 1/scale from the scale
//     tensor when it runs (float(1 / double(scale)), as the host computes it) and sets the flag;
//   - step(): eagerly the host reads the flag (the one read of the step) and skips
//     opt.step() on inf/NaN, as before. While captured it cannot: opt.step() runs with the flag
//     as its skip flag and the update kernels change nothing when it is set
//     (Note [Skipping an update on the device] in optim/optimizer.h);
//   - update(): one kernel applies torch's _amp_update_scale_ to the scale, the growth tracker
//     and the count of skipped steps, eagerly and captured alike.
// So an eager step and a replayed one run the same kernels on the same values: training with
// graphs equals training without them bit for bit, overflowing steps included
// (tests/train/cuda_graphs_test). The host reads the scale, the tracker and the skip count
// only when asked (a log line, a checkpoint).
GradScaler::GradScaler(const GradScalerOptions& opt, Device device)
    : opt_(opt), device_(device), scale_(float(opt.init_scale)) {
  RT_CHECK(std::isfinite(opt.init_scale) && opt.init_scale > 0.0, kWho, ": init_scale must be finite and > 0, got ",
           opt.init_scale);
  RT_CHECK(opt.growth_factor > 1.0, kWho, ": growth_factor must be > 1, got ", opt.growth_factor);
  RT_CHECK(opt.backoff_factor > 0.0 && opt.backoff_factor < 1.0, kWho, ": backoff_factor must be in (0, 1), got ",
           opt.backoff_factor);
  RT_CHECK(opt.growth_interval > 0, kWho, ": growth_interval must be > 0, got ", opt.growth_interval);
  if (!on_cuda()) return;
  scale_on_device_ = Tensor::full({}, double(scale_), DType::f32, device_);
  tracker_on_device_ = Tensor::zeros({1}, DType::i32, device_);
  skipped_on_device_ = Tensor::zeros({1}, DType::i64, device_);
  found_on_device_ = Tensor::zeros({1}, DType::f32, device_);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!on_cuda()) return mul(loss, double(scale_));
  RT_CHECK(loss.device() == device_, kWho, ": the loss is on ", loss.device().str(), " but the scaler on ",
           device_.str());
  return mul(loss, loss.dtype() == DType::f32 ? scale_on_device_ : scale_on_device_.to(loss.dtype()));
}

bool GradScaler::unscale(Optimizer& opt) {
  RT_CHECK(!unscaled_, kWho, ": unscale() already ran since the last update()");
  NoGradGuard no_grad;
  const float inv_scale = float(1.0 / double(scale_));
  bool found = false;
  // CUDA gradients by dtype, checked by one flag on the device.
  std::vector<void*> cuda_grads[2];
  std::vector<int64_t> cuda_n[2];
  for (const auto& [name, p] : opt.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    RT_CHECK(g.dtype() == DType::f32 || g.dtype() == DType::f64, kWho, ": the gradient of '", name, "' is ",
             dtype_name(g.dtype()), "; expected f32 or f64");
    RT_CHECK(g.device() == device_, kWho, ": the gradient of '", name, "' is on ", g.device().str(),
             " but the scaler keeps its state on ", device_.str(), " (construct it with the gradients' device)");
    if (on_cuda()) {
      const int k = g.dtype() == DType::f32 ? 0 : 1;
      cuda_grads[k].push_back(g.raw_data());
      cuda_n[k].push_back(g.numel());
    } else if (g.dtype() == DType::f32) {
      found |= unscale_cpu(g.data<float>(), g.numel(), inv_scale);
    } else {
      found |= unscale_cpu(g.data<double>(), g.numel(), inv_scale);
    }
  }
  captured_ = false;
  if (on_cuda()) {
    const auto s = static_cast<cudaStream_t>(Stream::current(device_).handle());
    found_on_device_.fill_(0.0);
    const float* sc = scale_on_device_.data<float>();
    float* flag = found_on_device_.data<float>();
    cuda::unscale_and_check(DType::f32, cuda_grads[0], cuda_n[0], 1.0f, sc, flag, tables_[0], s);
    cuda::unscale_and_check(DType::f64, cuda_grads[1], cuda_n[1], 1.0f, sc, flag, tables_[1], s);
    captured_ = cuda::stream_is_capturing(s);
    if (!captured_) found = found_on_device_.item() != 0.0;  // the one device-to-host read of an eager step
  }
  unscaled_ = true;
  found_inf_ = found;
  return found;
}

bool GradScaler::step(Optimizer& opt) {
  if (!unscaled_) unscale(opt);
  if (captured_) {
    RT_CHECK(opt.takes_skip_flag(), kWho, ": a captured step cannot skip this optimizer's update on the device "
             "(Note [Skipping an update on the device]); run it eagerly");
    opt.set_skip_flag(found_on_device_);
    try {
      opt.step();
    } catch (...) {
      opt.set_skip_flag(Tensor());
      throw;
    }
    opt.set_skip_flag(Tensor());
    return true;
  }
  if (found_inf_) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  RT_CHECK(unscaled_, kWho, ": update() needs a step() or unscale() first");
  if (on_cuda()) {
    const auto s = static_cast<cudaStream_t>(Stream::current(device_).handle());
    cuda::update_loss_scale(scale_on_device_.data<float>(), tracker_on_device_.data<int32_t>(),
                            skipped_on_device_.data<int64_t>(), found_on_device_.data<float>(),
                            float(opt_.growth_factor), float(opt_.backoff_factor), int32_t(opt_.growth_interval), s);
  } else if (found_inf_) {
    scale_ = scale_ * float(opt_.backoff_factor);
    growth_tracker_ = 0;
    ++skipped_;
  } else if (++growth_tracker_ == opt_.growth_interval) {
    const float grown = scale_ * float(opt_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
  captured_ = false;
}

double GradScaler::get_scale() const { return on_cuda() ? scale_on_device_.item() : double(scale_); }

int GradScaler::growth_tracker() const { return on_cuda() ? int(tracker_on_device_.item()) : growth_tracker_; }

int64_t GradScaler::skipped_steps() const { return on_cuda() ? int64_t(skipped_on_device_.item()) : skipped_; }

std::map<std::string, Tensor> GradScaler::state() const {
  RT_CHECK(!unscaled_, kWho, ": state() between unscale() and update(): the step is half done");
  return {{"scale", Tensor::scalar(get_scale(), DType::f32)},
          {"growth_tracker", Tensor::scalar(double(growth_tracker()), DType::i64)}};
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
  if (on_cuda()) {
    scale_on_device_.fill_(double(scale_));
    tracker_on_device_.fill_(tracker);
  }
}

}  // namespace rt::optim
