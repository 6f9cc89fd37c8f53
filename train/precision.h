// --precision: what training and evaluation compute in, and the per-step machinery of
// mixed precision (working copies, fp32 loss, loss scaling).
//
// Note [Precision]
//   fp32  f32 everywhere; TF32 explicitly off in cuBLAS and cuDNN (CUDA matches the CPU's ops).
//   tf32  f32 tensors, TF32 tensor cores allowed in cuBLAS and cuDNN (CUDA; the CPU has none).
//   bf16, fp16  convolutions, linear layers and activations in bf16/f16 on working copies
//         of the weights (Note [Compute copies], engine/nn/compute_copies.h); fp32 master
//         weights (the optimizer, state_dict, checkpoints and model.safetensors are fp32),
//         fp32 batch-norm parameters and statistics, fp32 loss. fp16 adds dynamic loss
//         scaling (optim/grad_scaler.h), whose state the checkpoint keeps. CUDA only: the
//         CPU backend computes in f32/f64.
//   auto  bf16 on a GPU of compute capability 8.0 or newer, else fp32.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "engine/nn/compute_copies.h"
#include "kernels/cuda/multi_tensor_table.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace rt::train {

enum class Precision : uint8_t { fp32, tf32, bf16, fp16 };
const char* precision_name(Precision p);

// --precision's value: fp32, tf32, bf16, fp16, or auto (nullopt). Anything else is an
// error listing them.
std::optional<Precision> parse_precision(const std::string& flag);
// The precision to use on `device`: the requested one, or auto's choice (nullopt). bf16/fp16
// on the CPU and bf16 on a GPU older than compute capability 8.0 are errors saying what to use.
Precision resolve_precision(std::optional<Precision> requested, Device device);
// The same from --precision's text.
Precision resolve_precision(const std::string& flag, Device device);
// Why auto chose what it chose ("compute capability 9.0", "CPU"), for the log.
std::string auto_precision_reason(Device device);

// The process-wide CUDA math switches for `p`: TF32 in cuBLAS and cuDNN on for tf32 and
// explicitly off otherwise; cuDNN's benchmark mode, and whether it times runtime-compiled
// engines too (Note [Conv numerics], kernels/cuda/cudnn_conv.cu), as given.
void set_cuda_math(Precision p, bool cudnn_benchmark, bool cudnn_benchmark_runtime_compiled = false);

struct MixedPrecisionOptions {
  // The dtype of convolutions, linear layers and activations. The parameters' dtype means
  // plain training (no copies). Production: bf16/f16 with fp32 masters; the CPU tests use
  // f32 with f64 masters.
  DType compute = DType::f32;
  bool loss_scaling = false;  // fp16: GradScaler's dynamic loss scaling
  optim::GradScalerOptions scaler;
};
MixedPrecisionOptions mixed_precision_options(Precision p);

// One model's forward, backward and optimizer step in a precision:
//
//   Tensor loss = cross_entropy(mp.forward(input), labels);   // per micro-batch
//   mp.backward(loss);                                        // grads sum in the masters
//   mp.step(opt);                                             // once per optimizer step
//   opt.zero_grad();
//
// The working copies are cast from the masters on the first forward after construction or
// after a step, so the masters may change otherwise (loading a checkpoint) only before the
// first forward.
class MixedPrecision {
 public:
  // `model` in its master dtype (f32 or f64, one for all parameters), on its device.
  MixedPrecision(nn::Module& model, const MixedPrecisionOptions& opt);

  DType input_dtype() const { return compute_; }  // what forward() expects (the loader's dtype)
  // The model's output on `input`, computed in the compute dtype and returned in the master
  // dtype (the loss is computed there).
  Tensor forward(const Tensor& input);
  // Backward of one micro-batch's loss (times the loss scale with loss scaling); the
  // gradients end up in the masters' (in their dtype), summed over the micro-batches.
  void backward(const Tensor& loss);
  // The optimizer step on the masters' gradients. With loss scaling they are unscaled and
  // checked first; a step with an inf/NaN gradient is skipped and the scale backs off.
  // Returns whether the optimizer stepped (true while the step is being captured as a CUDA
  // graph: the device decides then). The gradients stay (opt.zero_grad() drops them).
  // With clip_grad_norm > 0 the gradients' total 2-norm is clipped to it first, after the
  // loss scaler unscaled them (torch.nn.utils.clip_grad_norm_ after GradScaler.unscale_, as
  // torchvision's training script does).
  bool step(optim::Optimizer& opt, double clip_grad_norm = 0);

  bool loss_scaling() const { return scaler_.has_value(); }
  nn::Module& model() { return model_; }
  // The masters changed outside step() (the EMA's update of its model): the next forward
  // casts them to the working copies again.
  void weights_changed() { fresh_ = false; }
  // The 16-bit copies the graph computes with (null when the model computes in its own dtype).
  const nn::ComputeCopies* compute_copies() const { return copies_ ? &*copies_ : nullptr; }
  nn::ComputeCopies* compute_copies() { return copies_ ? &*copies_ : nullptr; }
  double loss_scale() const { return scaler_ ? scaler_->get_scale() : 1.0; }
  // Steps the loss scaler skipped on inf/NaN gradients since construction (0 without one). On
  // CUDA a read of device memory: a captured step's skip is decided there.
  int64_t overflow_skips() const { return scaler_ ? scaler_->skipped_steps() : 0; }
  // The loss scaler's state for checkpoints (optim::GradScaler::state()); empty without
  // loss scaling. load_state() needs it exactly when loss scaling is on.
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state);

 private:
  nn::Module& model_;
  DType master_, compute_;
  std::optional<nn::ComputeCopies> copies_;  // none when compute_ == master_
  std::optional<optim::GradScaler> scaler_;
  bool fresh_ = false;  // the copies hold the masters' current values
  cuda::MultiTensorTable clip_table_;  // the gradients clip_grad_norm scales, on the device
};

}  // namespace rt::train
