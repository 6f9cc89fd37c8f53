// The layers of a ResNet, with torchvision's parameter names and initialisation.
#pragma once

#include <memory>

#include "engine/nn/module.h"
#include "engine/ops.h"
#include "engine/random.h"

namespace rt::nn {

// weight (O, C/groups, KH, KW), Kaiming-normal with fan_out (torchvision's ResNet init:
// std = sqrt(2 / (O * KH * KW))); no bias by default (a batch norm follows).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in, int64_t out, int kernel, int stride, int padding, Generator& g, bool bias = false,
         int groups = 1);
  Tensor forward(const Tensor& x) override;
  // forward(x), also asking for the output's channel sums for the batch norm that follows
  // (conv2d with ChannelSums: filled where cuDNN fuses them, else left undefined).
  Tensor forward(const Tensor& x, ChannelSums* sums);
  // The weight forward computes with (its mixed-precision working copy, if bound).
  Tensor compute_weight() const { return compute(weight); }
  Tensor weight, bias;
  Conv2dParams params;
};

// weight 1, bias 0, running_mean 0, running_var 1, num_batches_tracked 0 (i64, 0-D).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double momentum = 0.1, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)), or relu(forward(x) + residual) when residual is defined: the fused
  // batch_norm_relu / batch_norm_add_relu ops (a ResNet block's tail in one pass).
  Tensor forward_relu(const Tensor& x, const Tensor& residual = Tensor());
  // Both with x's channel sums from the convolution that produced it (undefined: none), the
  // statistics taken from them (Note [Statistics from the convolution] in
  // engine/ops/batch_norm.cc); ask for them only where wants_sums().
  Tensor forward(const Tensor& x, const ChannelSums& sums);
  Tensor forward_relu(const Tensor& x, const Tensor& residual, const ChannelSums& sums);
  // conv.forward(forward_relu(x, {}, sums), conv_sums) as one op, batch_norm_relu_conv2d: the
  // convolution applies this batch norm and relu as it loads x
  // (Note [Batch norm as the next convolution's prologue] in engine/ops/batch_norm_relu_conv2d.cc);
  // as written (each module its own op) when !prologue_into_conv, !fuse_relu, conv has a bias,
  // or where the op would not fuse (batch_norm_relu_conv2d_fuses: the CPU, NCHW, SyncBN, ...).
  Tensor forward_relu_conv(const Tensor& x, const ChannelSums& sums, Conv2d& conv, ChannelSums* conv_sums);
  // relu(forward(x) + shortcut.forward(r)), x and r with their convolutions' sums, as one op,
  // dual_batch_norm_add_relu: the tail of a block whose shortcut is a downsample, neither
  // batch norm's output written (Note [Two batch norms in one tail] in
  // engine/ops/dual_batch_norm_add_relu.cc); as written (each module its own op) when
  // !dual_tail, !fuse_relu, off CUDA or with SyncBN. The fused op's time goes to this module.
  Tensor forward_add_relu(const Tensor& x, const ChannelSums& sums, BatchNorm2d& shortcut, const Tensor& r,
                          const ChannelSums& r_sums);
  // Whether the next forward would use a convolution's sums: training, no sync, sums_from_conv.
  bool wants_sums() const { return sums_from_conv && is_training() && !sync; }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  double momentum, eps;
  bool fuse_relu = true;  // false: forward_relu as forward, then relu or add_relu (the unfused composition)
  bool sums_from_conv = true;  // false: wants_sums() never (statistics from a pass over x, for comparing the two)
  bool prologue_into_conv = true;  // false: forward_relu_conv as written (for comparing the two)
  bool dual_tail = true;           // false: forward_add_relu as written (for comparing the two)
  // Training-mode statistics over every process's batch (Note [Synchronised batch norm] in
  // engine/ops/batch_norm_sync.h); null: this process's batch. See set_batch_norm_sync.
  std::shared_ptr<BatchNormSync> sync;
  // PyTorch counts every training-mode forward (num_batches_tracked, on the host). false: the
  // forward does not, its caller counts (a captured step, counted at each replay:
  // Note [The training step as a CUDA graph] in train/step.cc).
  bool count_in_forward = true;
  void count_batch();

 protected:
  bool keeps_master_dtype() const override { return true; }  // Note [Batch norm in mixed precision]
};

// Every BatchNorm2d of `model` synchronises through `sync` from now on (null: none again),
// like PyTorch's SyncBatchNorm.convert_sync_batchnorm. Returns how many there are.
int64_t set_batch_norm_sync(Module& model, const std::shared_ptr<BatchNormSync>& sync);

// PyTorch's default Linear init: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, Generator& g, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
};

}  // namespace rt::nn
