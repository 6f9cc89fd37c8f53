#include "engine/nn/layers.h"

#include <cmath>

#include "engine/nn/compute_copies.h"
#include "engine/profiler.h"
#include "kernels/cuda/batch_norm.h"

namespace rt::nn {
namespace {

// A batch-norm parameter as batch_norm takes it for x (Note [Batch norm in mixed precision]).
Tensor param_for(const Tensor& p, const Tensor& x) {
  if (!p.defined()) return p;
  if (x.device().is_cuda() && p.dtype() == cuda::batch_norm_stat_dtype(x.dtype())) return p;
  return cast(p, x.dtype());
}

}  // namespace

Conv2d::Conv2d(int64_t in, int64_t out, int kernel, int stride, int padding, Generator& g, bool with_bias, int groups)
    : params(Conv2dParams::make(stride, padding, 1, groups)) {
  const double std = std::sqrt(2.0 / double(out * kernel * kernel));
  weight = register_parameter("weight", randn({out, in / groups, kernel, kernel}, g, DType::f32, Device::cpu(),
                                              MemoryFormat::contiguous, 0.0, std));
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({out}));
}

Tensor Conv2d::forward(const Tensor& x) { return forward(x, nullptr); }

Tensor Conv2d::forward(const Tensor& x, ChannelSums* sums) {
  const prof::ModuleScope scope(this);
  return conv2d(x, compute(weight), compute(bias), params, sums);
}

BatchNorm2d::BatchNorm2d(int64_t channels, double m, double e) : momentum(m), eps(e) {
  weight = register_parameter("weight", Tensor::full({channels}, 1.0));
  bias = register_parameter("bias", Tensor::zeros({channels}));
  running_mean = register_buffer("running_mean", Tensor::zeros({channels}));
  running_var = register_buffer("running_var", Tensor::full({channels}, 1.0));
  num_batches_tracked = register_buffer("num_batches_tracked", Tensor::zeros({}, DType::i64));
}

void BatchNorm2d::count_batch() {
  if (!is_training()) return;
  // A host-side counter of a CPU scalar; the CUDA backend keeps it on the host too.
  Tensor host = num_batches_tracked.to(Device::cpu());
  host.data<int64_t>()[0] += 1;
  if (!host.same(num_batches_tracked)) num_batches_tracked.copy_(host);
}

Tensor BatchNorm2d::forward_relu(const Tensor& x, const Tensor& residual) { return forward_relu(x, residual, {}); }

Tensor BatchNorm2d::forward_relu(const Tensor& x, const Tensor& residual, const ChannelSums& sums) {
  const prof::ModuleScope scope(this);
  if (count_in_forward) count_batch();
  // As in forward (Note [Batch norm in mixed precision]).
  const Tensor w = param_for(weight, x), b = param_for(bias, x);
  if (!fuse_relu) {
    const Tensor y = batch_norm(x, w, b, running_mean, running_var, is_training(), momentum, eps, sync, sums);
    return residual.defined() ? add_relu(y, residual) : relu(y);
  }
  if (residual.defined())
    return batch_norm_add_relu(x, residual, w, b, running_mean, running_var, is_training(), momentum, eps, sync,
                               sums);
  return batch_norm_relu(x, w, b, running_mean, running_var, is_training(), momentum, eps, sync, sums);
}

Tensor BatchNorm2d::forward_relu_conv(const Tensor& x, const ChannelSums& sums, Conv2d& conv, ChannelSums* conv_sums) {
  // Unfused, each module runs its own op in its own profiler scope.
  if (!prologue_into_conv || !fuse_relu || conv.bias.defined() ||
      !batch_norm_relu_conv2d_fuses(x, is_training(), sync, conv.compute_weight(), conv.params, conv_sums))
    return conv.forward(forward_relu(x, Tensor(), sums), conv_sums);
  const prof::ModuleScope scope(this);  // the fused op's time goes to the batch norm, which starts it
  if (count_in_forward) count_batch();
  const Tensor w = param_for(weight, x), b = param_for(bias, x);  // Note [Batch norm in mixed precision]
  return batch_norm_relu_conv2d(x, w, b, running_mean, running_var, is_training(), momentum, eps, sync, sums,
                                conv.compute_weight(), conv.params, conv_sums);
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const ChannelSums& sums, BatchNorm2d& shortcut,
                                     const Tensor& r, const ChannelSums& r_sums) {
  const bool training = is_training();
  RT_CHECK(shortcut.is_training() == training, "BatchNorm2d::forward_add_relu: the shortcut's batch norm is in ",
           shortcut.is_training() ? "training" : "eval", " mode and this one is not (set the mode on the whole model)");
  if (!dual_tail || !fuse_relu || !x.device().is_cuda() || (training && (sync || shortcut.sync)))
    return forward_relu(x, shortcut.forward(r, r_sums), sums);
  const prof::ModuleScope scope(this);
  if (count_in_forward) count_batch();
  if (shortcut.count_in_forward) shortcut.count_batch();
  // Note [Batch norm in mixed precision], for both.
  const BatchNormArgs a{param_for(weight, x), param_for(bias, x), running_mean, running_var, momentum, eps, sums};
  const BatchNormArgs b{param_for(shortcut.weight, r), param_for(shortcut.bias, r), shortcut.running_mean,
                        shortcut.running_var, shortcut.momentum, shortcut.eps, r_sums};
  return dual_batch_norm_add_relu(x, a, r, b, training);
}

Tensor BatchNorm2d::forward(const Tensor& x) { return forward(x, ChannelSums{}); }

Tensor BatchNorm2d::forward(const Tensor& x, const ChannelSums& sums) {
  const prof::ModuleScope scope(this);
  if (count_in_forward) count_batch();
  // Note [Batch norm in mixed precision]
  // The parameters and running statistics stay in the master dtype (keeps_master_dtype)
  // while x comes in the compute dtype. batch_norm takes running statistics of another
  // dtype, and on CUDA weight and bias in its statistics dtype (f32 for a bf16 or f16 x:
  // Note [Batch norm parameters in the statistics dtype]), so f32 masters go in as they are
  // and their gradients come back in f32. Otherwise (the CPU, or f64 masters) they are cast
  // to x's dtype here (C values, differentiably: the gradient reaches the masters in their
  // dtype): param_for.
  const Tensor w = param_for(weight, x), b = param_for(bias, x);
  return batch_norm(x, w, b, running_mean, running_var, is_training(), momentum, eps, sync, sums);
}

int64_t set_batch_norm_sync(Module& model, const std::shared_ptr<BatchNormSync>& sync) {
  int64_t n = 0;
  model.for_each_module([&](Module& m) {
    if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) {
      bn->sync = sync;
      ++n;
    }
  });
  return n;
}

Linear::Linear(int64_t in, int64_t out, Generator& g, bool with_bias) {
  const double bound = 1.0 / std::sqrt(double(in));
  weight = register_parameter("weight", rand_uniform({out, in}, g, -bound, bound));
  if (with_bias) bias = register_parameter("bias", rand_uniform({out}, g, -bound, bound));
}

Tensor Linear::forward(const Tensor& x) {
  const prof::ModuleScope scope(this);
  return linear(x, compute(weight), compute(bias));
}

}  // namespace rt::nn
