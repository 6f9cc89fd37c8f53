// The differentiable ops of ringtape: what models are built from. Each op validates its
// arguments (clear errors naming the op, the argument, what was expected and what came),
// dispatches to the backend of its inputs' device, and records its backward on the tape.
//
// Semantics follow PyTorch's (torch.nn.functional) exactly; each op's file in
// engine/ops/ says where a detail matters. Image ops accept NCHW (contiguous) and NHWC
// (channels_last) inputs and return results in the input's format.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/ops/batch_norm_sync.h"
#include "engine/tensor.h"

namespace rt {

// ---- elementwise (same shape, dtype, device; the result takes a's format) -------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double s);
Tensor add(const Tensor& a, double s);
Tensor relu(const Tensor& x);
Tensor add_relu(const Tensor& a, const Tensor& b);  // relu(a + b): a residual block's tail
Tensor square(const Tensor& x);
Tensor sqrt(const Tensor& x);

// In place, not recorded (gradient accumulation, optimizers): a += alpha * b.
void add_(Tensor a, const Tensor& b, double alpha = 1.0);
void mul_(Tensor a, double s);

// ---- reductions ------------------------------------------------------------------
Tensor sum(const Tensor& x);   // all elements -> 0-D
Tensor mean(const Tensor& x);  // all elements -> 0-D

// ---- shape -----------------------------------------------------------------------
Tensor reshape(const Tensor& x, const Shape& shape);  // a view when the layout allows, else a copy
Tensor flatten(const Tensor& x, int start_dim = 1);    // dims [start_dim, end) into one
Tensor to_format(const Tensor& x, MemoryFormat f);     // differentiable relayout

// ---- convolution -----------------------------------------------------------------
struct Conv2dParams {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
  static Conv2dParams make(int stride, int pad, int dilation = 1, int groups = 1) {
    return {stride, stride, pad, pad, dilation, dilation, groups};
  }
};
// x (N, C, H, W), weight (O, C/groups, KH, KW), bias (O) or undefined -> (N, O, HO, WO).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);

// ---- batch normalisation ----------------------------------------------------------
// x (N, C, ...) with weight, bias (C) (or undefined: affine off). Training: normalise with
// the batch's biased variance; update running_mean/var (if defined) with the unbiased
// variance: r = (1 - momentum) * r + momentum * batch_stat. Eval: use the running stats.
// sync (training only; null: none): the batch is every process's together, statistics and
// their gradients combined through it (Note [Synchronised batch norm] in
// engine/ops/batch_norm_sync.h); CPU and CUDA.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                  Tensor running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                  std::shared_ptr<BatchNormSync> sync = nullptr);
// Fused tails of a residual block, same arguments and running-stat update as batch_norm, in
// one pass each way (the backward needs only the output, as relu's does):
//   batch_norm_relu     = relu(batch_norm(x, ...))
//   batch_norm_add_relu = relu(batch_norm(x, ...) + residual)   (residual: x's shape/dtype/device)
Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                       Tensor running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                       std::shared_ptr<BatchNormSync> sync = nullptr);
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                           Tensor running_mean, Tensor running_var, bool training, double momentum = 0.1,
                           double eps = 1e-5, std::shared_ptr<BatchNormSync> sync = nullptr);

// ---- pooling ---------------------------------------------------------------------
struct Pool2dParams {
  int kernel_h = 1, kernel_w = 1;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  bool ceil_mode = false;
  static Pool2dParams make(int kernel, int stride, int pad, int dilation = 1, bool ceil_mode = false) {
    return {kernel, kernel, stride, stride, pad, pad, dilation, dilation, ceil_mode};
  }
};
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
// Output cell i covers input rows [floor(i*H/OH), ceil((i+1)*H/OH)), likewise columns.
Tensor adaptive_avg_pool2d(const Tensor& x, int out_h, int out_w);
Tensor global_avg_pool(const Tensor& x);  // (N, C, H, W) -> (N, C)

// ---- dense -----------------------------------------------------------------------
// x (N, in), weight (out, in), bias (out) or undefined -> (N, out) = x W^T + b.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// ---- input -----------------------------------------------------------------------
// A loader batch -> model input: pixels (N, H, W, C) u8 -> (N, C, H, W) of `dtype` in
// memory format `format`, on the pixels' device, with y = (x / 255 - mean[c]) / std[c]
// computed as fma(x, 1 / (255 std[c]), -mean[c] / std[c]) in the compute type (the same
// bits on CPU and CUDA). mean/std: 1 value (all channels) or C values. Not differentiable
// (the input is data). CPU: f32 or f64 outputs; CUDA: also bf16, f16.
Tensor normalize_pixels(const Tensor& pixels, const std::vector<double>& mean, const std::vector<double>& std,
                        MemoryFormat format, DType dtype = DType::f32);

// ---- loss ------------------------------------------------------------------------
// Mean over the batch of softmax cross-entropy; logits (N, K), target i64 (N) in [0, K).
// With label smoothing e: loss_i = (1 - e) * nll_i + e * mean_k(-log p_ik).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0);

}  // namespace rt
