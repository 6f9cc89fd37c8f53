// torchvision's model EMA: the checks, the CPU loop and the CUDA launches
// (Note [EMA rounding] in ema.h before changing any expression).
#include "optim/ema.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "engine/autograd.h"
#include "engine/profiler.h"
#include "engine/stream.h"
#include "kernels/cuda/ema.h"
#include "optim/param_util.h"

namespace rt::optim {
namespace {

constexpr const char* kWho = "model EMA";
const std::string kModulePrefix = "module.";  // AveragedModel keeps the model as self.module
const std::string kCount = "n_averaged";

// As in update_cpu.cc: below this many elements one thread does the tensor.
constexpr int64_t kParallelMin = int64_t(1) << 15;

// avg, p: n elements. T: the storage type; C: the compute type (T, or float for int64).
// Compiled with -ffp-contract=off: the products and the sum round separately, like ATen's
// three ops.
template <typename T, typename C>
void ema_cpu(T* avg, const T* p, int64_t n, double decay, bool copy) {
  if (copy) {
    if (n > 0) std::memcpy(avg, p, size_t(n) * sizeof(T));
    return;
  }
  const C d = C(decay), one_minus_d = C(1.0 - decay);  // Python's (1 - decay) in double, then rounded
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const C kept = d * C(avg[i]);         // decay * avg
    const C taken = one_minus_d * C(p[i]);  // (1 - decay) * p
    avg[i] = T(kept + taken);             // int64: truncated toward zero, as copy_ does
  }
}

void update_on_cpu(const Tensor& avg, const Tensor& p, double decay, bool copy) {
  const int64_t n = avg.numel();
  switch (avg.dtype()) {
    case DType::f32: return ema_cpu<float, float>(avg.data<float>(), p.data<float>(), n, decay, copy);
    case DType::f64: return ema_cpu<double, double>(avg.data<double>(), p.data<double>(), n, decay, copy);
    case DType::i64: return ema_cpu<int64_t, float>(avg.data<int64_t>(), p.data<int64_t>(), n, decay, copy);
    default: RT_FAIL(kWho, ": unsupported dtype ", dtype_name(avg.dtype()));
  }
}

bool supported(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::i64; }

void check_options(const ModelEmaOptions& o) {
  RT_CHECK(std::isfinite(o.decay) && o.decay >= 0.0 && o.decay <= 1.0, kWho, ": decay must be in [0, 1], got ",
           o.decay);
  RT_CHECK(o.steps >= 1, kWho, ": steps (updates every steps-th iteration) must be >= 1, got ", o.steps);
  RT_CHECK(o.warmup_epochs >= 0, kWho, ": warmup_epochs must be >= 0, got ", o.warmup_epochs);
}

}  // namespace

double ema_decay_for(double decay, int64_t world_size, int64_t batch_size, int64_t ema_steps, int64_t epochs) {
  RT_CHECK(std::isfinite(decay), kWho, ": decay must be finite, got ", decay);
  RT_CHECK(world_size >= 1 && batch_size >= 1 && ema_steps >= 1 && epochs >= 1, kWho,
           ": world size, batch size, EMA steps and epochs must be >= 1, got ", world_size, ", ", batch_size, ", ",
           ema_steps, ", ", epochs);
  // Python: an exact integer product, then a correctly rounded true division.
  const double adjust = double(world_size * batch_size * ema_steps) / double(epochs);
  const double alpha = std::min(1.0, (1.0 - decay) * adjust);
  return 1.0 - alpha;
}

ModelEma::ModelEma(nn::NamedTensors model, nn::NamedTensors ema, const ModelEmaOptions& opt)
    : model_(std::move(model)), ema_(std::move(ema)), opt_(opt) {
  check_options(opt_);
  RT_CHECK(!model_.empty(), kWho, ": got an empty tensor list (expected the model's state_dict())");
  RT_CHECK(model_.size() == ema_.size(), kWho, ": the model has ", model_.size(), " tensors but the EMA model has ",
           ema_.size(), " (expected two models of the same architecture)");
  std::set<std::string> names;
  std::set<const void*> storage;  // every tensor's data, so an EMA tensor never aliases another
  for (size_t i = 0; i < model_.size(); ++i) {
    const auto& [name, p] = model_[i];
    const auto& [ema_name, avg] = ema_[i];
    RT_CHECK(name == ema_name, kWho, ": tensor ", i, " is '", name, "' in the model but '", ema_name,
             "' in the EMA model (the lists must hold the same names in the same order)");
    RT_CHECK(names.insert(name).second, kWho, ": tensor name '", name, "' is listed twice");
    RT_CHECK(p.defined() && avg.defined(), kWho, ": tensor '", name, "' is undefined in the ",
             p.defined() ? "EMA model" : "model");
    RT_CHECK(supported(p.dtype()), kWho, ": tensor '", name, "' is ", dtype_name(p.dtype()),
             "; expected f32, f64 or i64");
    RT_CHECK(avg.shape() == p.shape(), kWho, ": tensor '", name, "' has shape ", shape_str(avg.shape()),
             " in the EMA model but ", shape_str(p.shape()), " in the model");
    if (p.numel() > 0) {
      RT_CHECK(storage.insert(p.raw_data()).second, kWho, ": tensor '", name,
               "' of the model shares its memory with an earlier tensor");
      RT_CHECK(storage.insert(avg.raw_data()).second, kWho, ": tensor '", name,
               "' of the EMA model shares its memory with the model's or an earlier tensor (it needs its own copy)");
    }
  }
  check_pairs();
  NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) ema_[i].second.copy_(model_[i].second);
}

void ModelEma::check_pairs() const {
  for (size_t i = 0; i < model_.size(); ++i) {
    const auto& [name, p] = model_[i];
    const Tensor& avg = ema_[i].second;
    RT_CHECK(avg.dtype() == p.dtype(), kWho, ": tensor '", name, "' is ", dtype_name(avg.dtype()),
             " in the EMA model but ", dtype_name(p.dtype()), " in the model");
    RT_CHECK(avg.device() == p.device(), kWho, ": tensor '", name, "' is on ", avg.device().str(),
             " in the EMA model but on ", p.device().str(), " in the model");
    RT_CHECK(avg.format() == p.format(), kWho, ": tensor '", name, "' differs in memory format: ", avg.str(),
             " in the EMA model, ", p.str(), " in the model");
  }
}

bool ModelEma::after_optimizer_step(int64_t epoch, int64_t iteration) {
  RT_CHECK(epoch >= 0 && iteration >= 0, kWho, ": epoch and iteration must be >= 0, got ", epoch, " and ",
           iteration);
  if (iteration % opt_.steps != 0) return false;
  update();
  if (epoch < opt_.warmup_epochs) reset_count();
  return true;
}

void ModelEma::update() {
  prof::OpScope scope("model_ema_update");
  // avg and p read, avg written; 3 flops (two products, a sum) per element.
  if (scope.active()) scope.describe({}, update_cost(ema_, 3, 3));
  check_pairs();
  NoGradGuard no_grad;
  const bool copy = n_averaged_ == 0;
  std::vector<cuda::EmaTensor> on_cuda[3];  // f32, f64, i64
  const Tensor* any_cuda = nullptr;
  for (size_t i = 0; i < ema_.size(); ++i) {
    const Tensor& avg = ema_[i].second;
    const Tensor& p = model_[i].second;
    if (!avg.device().is_cuda()) {
      update_on_cpu(avg, p, opt_.decay, copy);
      continue;
    }
    const int list = avg.dtype() == DType::f32 ? 0 : avg.dtype() == DType::f64 ? 1 : 2;
    on_cuda[list].push_back(cuda::EmaTensor{avg.raw_data(), p.raw_data(), avg.numel()});
    any_cuda = &avg;
  }
  if (any_cuda != nullptr) {
    const auto stream = static_cast<cudaStream_t>(Stream::current(any_cuda->device()).handle());
    const DType types[3] = {DType::f32, DType::f64, DType::i64};
    for (int k = 0; k < 3; ++k)
      if (!on_cuda[k].empty()) cuda::ema_update(types[k], on_cuda[k], opt_.decay, copy, tables_[k], stream);
  }
  ++n_averaged_;
}

std::map<std::string, Tensor> ModelEma::state() const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : ema_) out[kModulePrefix + name] = t.clone();
  Tensor count = Tensor::zeros({}, DType::i64);
  count.data<int64_t>()[0] = n_averaged_;
  out[kCount] = count;
  return out;
}

void ModelEma::load_state(const std::map<std::string, Tensor>& state) {
  std::set<std::string> expected{kCount};
  for (const auto& [name, t] : ema_) expected.insert(kModulePrefix + name);
  for (const auto& [key, t] : state)
    RT_CHECK(expected.count(key) == 1, kWho, ": unexpected state entry '", clip_for_message(key), "'; expected '",
             kCount, "' and '", kModulePrefix, "<name>' for each of the model's ", ema_.size(), " tensors");

  auto count_it = state.find(kCount);
  RT_CHECK(count_it != state.end(), kWho, ": the state has no '", kCount, "'");
  const Tensor& c = count_it->second;
  RT_CHECK(c.defined() && !is_floating(c.dtype()) && c.numel() == 1, kWho, ": '", kCount,
           "' must be one integer, got ", c.defined() ? c.str() : std::string("an undefined tensor"));
  const int64_t count = c.to_vector<int64_t>()[0];
  RT_CHECK(count >= 0, kWho, ": '", kCount, "' must be >= 0, got ", count);

  for (const auto& [name, avg] : ema_) {
    const std::string key = kModulePrefix + name;
    auto it = state.find(key);
    RT_CHECK(it != state.end(), kWho, ": the state has no '", key, "' (the EMA of tensor '", name, "')");
    const Tensor& saved = it->second;
    RT_CHECK(saved.defined(), kWho, ": state entry '", key, "' is an undefined tensor");
    RT_CHECK(saved.shape() == avg.shape(), kWho, ": state entry '", key, "' has shape ", shape_str(saved.shape()),
             " but the model's tensor has shape ", shape_str(avg.shape()));
    RT_CHECK(is_floating(saved.dtype()) == is_floating(avg.dtype()), kWho, ": state entry '", key, "' is ",
             dtype_name(saved.dtype()), " but the model's tensor is ", dtype_name(avg.dtype()),
             " (floating and integer do not convert)");
  }
  // Everything checked: now change.
  NoGradGuard no_grad;
  for (const auto& [name, avg] : ema_) {
    Tensor dst = avg;
    dst.copy_(state.at(kModulePrefix + name));
  }
  n_averaged_ = count;
}

}  // namespace rt::optim
