#include "train/precision.h"

#include "optim/clip_grad.h"

#include "kernels/cuda/conv2d.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/runtime.h"

namespace rt::train {
namespace {

// bf16 tensor-core GEMMs and convolutions need Ampere (compute capability 8.0) or newer.
bool has_bf16(Device d) { return d.is_cuda() && cuda::device_props(d.index).cc_major >= 8; }

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

std::string auto_precision_reason(Device device) {
  if (!device.is_cuda()) return "on the CPU";
  const cuda::DeviceProps p = cuda::device_props(device.index);
  return "compute capability " + std::to_string(p.cc_major) + "." + std::to_string(p.cc_minor);
}

std::optional<Precision> parse_precision(const std::string& flag) {
  if (flag == "auto") return std::nullopt;
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16})
    if (flag == precision_name(p)) return p;
  RT_FAIL("--precision takes fp32, tf32, bf16, fp16 or auto, got '", flag, "'");
}

Precision resolve_precision(std::optional<Precision> requested, Device device) {
  if (!requested) return has_bf16(device) ? Precision::bf16 : Precision::fp32;
  const Precision p = *requested;
  if (p == Precision::fp32 || p == Precision::tf32) return p;
  RT_CHECK(device.is_cuda(), "--precision ", precision_name(p), " needs a GPU: the CPU backend computes in f32/f64. ",
           "Use --precision fp32 (or auto), or train on a GPU (--device cuda)");
  if (p == Precision::fp16) return p;
  RT_CHECK(has_bf16(device), "--precision bf16 needs a GPU of compute capability 8.0 or newer; ", device.str(), " has ",
           auto_precision_reason(device), ". Use --precision fp16 or fp32");
  return p;
}

Precision resolve_precision(const std::string& flag, Device device) {
  return resolve_precision(parse_precision(flag), device);
}

void set_cuda_math(Precision p, bool cudnn_benchmark, bool cudnn_benchmark_runtime_compiled) {
  cuda::set_allow_tf32(p == Precision::tf32);
  cuda::set_cudnn_allow_tf32(p == Precision::tf32);
  cuda::set_cudnn_benchmark(cudnn_benchmark);
  cuda::set_cudnn_benchmark_runtime_compiled(cudnn_benchmark_runtime_compiled);
}

MixedPrecisionOptions mixed_precision_options(Precision p) {
  MixedPrecisionOptions o;
  o.compute = p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32;
  o.loss_scaling = p == Precision::fp16;
  return o;
}

MixedPrecision::MixedPrecision(nn::Module& model, const MixedPrecisionOptions& opt)
    : model_(model), compute_(opt.compute) {
  const nn::NamedTensors params = model.named_parameters();
  RT_CHECK(!params.empty(), "mixed precision: the model has no parameters");
  master_ = params[0].second.dtype();
  for (const auto& [name, p] : params)
    RT_CHECK(p.dtype() == master_ && (master_ == DType::f32 || master_ == DType::f64), "mixed precision: parameter '",
             name, "' is ", p.str(), "; the master weights must all be f32 (or all f64)");
  if (compute_ != master_) copies_.emplace(model, compute_);
  if (opt.loss_scaling) scaler_.emplace(opt.scaler, params[0].second.device());
}

Tensor MixedPrecision::forward(const Tensor& input) {
  RT_CHECK(input.dtype() == compute_, "mixed precision: the model input is ", input.str(), " but the compute dtype is ",
           dtype_name(compute_), " (give the data loader's DeviceFeeder input_dtype())");
  if (copies_ && !fresh_) copies_->refresh();
  fresh_ = true;
  return nn::cast(model_.forward(input), master_);
}

void MixedPrecision::backward(const Tensor& loss) {
  if (scaler_) scaler_->scale(loss).backward();
  else loss.backward();
  if (copies_) copies_->accumulate_grads();
}

bool MixedPrecision::step(optim::Optimizer& opt, double clip_grad_norm) {
  if (!scaler_) {
    if (clip_grad_norm > 0) optim::clip_grad_norm(opt.params(), clip_grad_norm, &clip_table_);
    opt.step();
    fresh_ = false;
    return true;
  }
  if (clip_grad_norm > 0) {
    scaler_->unscale(opt);  // a step with inf/NaN gradients is still skipped by step() below
    optim::clip_grad_norm(opt.params(), clip_grad_norm, &clip_table_);
  }
  const bool stepped = scaler_->step(opt);
  scaler_->update();
  fresh_ = fresh_ && !stepped;
  return stepped;
}

std::map<std::string, Tensor> MixedPrecision::state() const {
  return scaler_ ? scaler_->state() : std::map<std::string, Tensor>{};
}

void MixedPrecision::load_state(const std::map<std::string, Tensor>& state) {
  if (scaler_) {
    RT_CHECK(!state.empty(), "the checkpoint has no loss-scaler state: it was not trained with --precision fp16");
    scaler_->load_state(state);
  } else {
    RT_CHECK(state.empty(), "the checkpoint holds a loss-scaler state (--precision fp16) but this run has no loss "
             "scaling");
  }
}

}  // namespace rt::train
