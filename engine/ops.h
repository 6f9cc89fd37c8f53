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

// ---- elementwise ------------------------------------------------------------------
// One table of ops for both backends, formulas forward and backward
// (Note [Elementwise op table] in kernels/elementwise_ops.h: a new op is one entry there plus
// its function here).
// Floating dtypes; CPU: f32, f64; CUDA: also bf16, f16 (computed in float, rounded once).
//
// Binary ops broadcast as in NumPy/PyTorch: the shapes are aligned at their last dim and each
// pair of sizes must be equal or one of them 1; the result takes the larger size of each pair
// ((N, C, H, W) * (N, C, 1, 1), (N, C) + (C), (N, C, H, W) - (1, C, 1, 1), (2, 1) * (1, 3) ->
// (2, 3)). Operands must share dtype and device; shapes that do not broadcast are an error
// naming both. The gradient of a broadcast operand is summed over the dims it was broadcast
// along, back to its own shape and format. Operands may differ in memory format (an NHWC
// image times an (N, C, 1, 1) NCHW scale): values are matched by logical coordinates. The
// result takes the format of the first operand of the result's shape (a's when both are),
// else of the first 4-D operand. Equal shapes take a single dense pass.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_relu(const Tensor& a, const Tensor& b);  // relu(a + b): a residual block's tail
// With a scalar (y = a * s, y = a + s).
Tensor mul(const Tensor& a, double s);
Tensor add(const Tensor& a, double s);

// Unary ops: the result has x's shape and format. The backward is one fused kernel of the
// op's derivative from the saved input or output (sigmoid: dy * y * (1 - y)).
Tensor relu(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor neg(const Tensor& x);
Tensor silu(const Tensor& x);               // x * sigmoid(x)
Tensor pow(const Tensor& x, double p);      // x^p; gradient p * x^(p-1) (0 for p = 0)

// In place, not recorded (gradient accumulation, optimizers): a += alpha * b (b of a's shape;
// no broadcasting in place).
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

// Per-channel sums of a convolution's output, written by the convolution itself where cuDNN
// fuses them into it (Note [Statistics from the convolution] in engine/ops/batch_norm.cc):
// the training statistics of the batch norm that follows, without reading y again.
struct ChannelSums {
  Tensor sum, sqsum;  // (O,) f32 on y's device: sum of y and of y^2 per channel; undefined: not computed
  bool defined() const { return sum.defined(); }
};
// conv2d, also filling *sums where a fused engine computes them (CUDA, channels-last,
// groups 1, no bias, bf16/f16, or f32 with TF32 allowed); elsewhere *sums is left undefined
// and y is what conv2d(x, weight, bias, p) gives. Not differentiable through *sums.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p, ChannelSums* sums);

// ---- batch normalisation ----------------------------------------------------------
// x (N, C, ...) with weight, bias (C) (or undefined: affine off). Training: normalise with
// the batch's biased variance; update running_mean/var (if defined) with the unbiased
// variance: r = (1 - momentum) * r + momentum * batch_stat. Eval: use the running stats.
// sync (training only; null: none): the batch is every process's together, statistics and
// their gradients combined through it (Note [Synchronised batch norm] in
// engine/ops/batch_norm_sync.h); CPU and CUDA. sums (training without sync, CUDA; undefined:
// none): x's channel sums from the convolution that produced it (conv2d above), the
// statistics taken from them instead of a pass over x.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                  Tensor running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                  std::shared_ptr<BatchNormSync> sync = nullptr, const ChannelSums& sums = {});
// Fused tails of a residual block, same arguments and running-stat update as batch_norm, in
// one pass each way (the backward needs only the output, as relu's does):
//   batch_norm_relu     = relu(batch_norm(x, ...))
//   batch_norm_add_relu = relu(batch_norm(x, ...) + residual)   (residual: x's shape/dtype/device)
Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                       Tensor running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                       std::shared_ptr<BatchNormSync> sync = nullptr, const ChannelSums& sums = {});
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                           Tensor running_mean, Tensor running_var, bool training, double momentum = 0.1,
                           double eps = 1e-5, std::shared_ptr<BatchNormSync> sync = nullptr,
                           const ChannelSums& sums = {});
// One batch norm's parameters, running statistics, settings and channel sums, as batch_norm
// takes them.
struct BatchNormArgs {
  Tensor weight, bias, running_mean, running_var;
  double momentum = 0.1, eps = 1e-5;
  ChannelSums sums;
};
// The tail of a block whose shortcut has its own batch norm (a downsample), as one op:
//   dual_batch_norm_add_relu(x, a, r, b) = relu(batch_norm(x, a...) + batch_norm(r, b...))
// (r: x's shape, dtype and device), both running statistics updated as batch_norm's. On CUDA
// without sync one pass each way reads both inputs and neither batch norm's output is written
// (Note [Two batch norms in one tail] in engine/ops/dual_batch_norm_add_relu.cc): the same
// values within one rounding. Elsewhere the composition. Differentiable in x, r and both
// batch norms' weight and bias.
Tensor dual_batch_norm_add_relu(const Tensor& x, const BatchNormArgs& a, const Tensor& r, const BatchNormArgs& b,
                                bool training, const std::shared_ptr<BatchNormSync>& sync = nullptr);
// A batch norm and relu whose output only feeds a convolution, as one op:
//   batch_norm_relu_conv2d(x, ...) = conv2d(batch_norm_relu(x, weight, ..., sync, sums), conv_weight, {}, p, conv_sums)
// with batch_norm_relu's arguments and running-stat update and conv2d's (no bias). On CUDA,
// channels-last, without sync, where cuDNN fuses (bf16/f16, or f32 with TF32) the convolution
// applies the normalisation and relu as it loads x and the activation is never written
// (Note [Batch norm as the next convolution's prologue] in engine/ops/batch_norm_relu_conv2d.cc):
// the same values within the formula's rounding. Elsewhere the two ops as written.
// Differentiable in x, weight, bias and conv_weight.
Tensor batch_norm_relu_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                              Tensor running_var, bool training, double momentum, double eps,
                              std::shared_ptr<BatchNormSync> sync, const ChannelSums& sums,
                              const Tensor& conv_weight, const Conv2dParams& p, ChannelSums* conv_sums = nullptr);
// Whether batch_norm_relu_conv2d with these arguments (conv_sums: asked for) runs fused; false:
// it would run the composition (a caller may then call the two ops itself, in its own scopes).
bool batch_norm_relu_conv2d_fuses(const Tensor& x, bool training, const std::shared_ptr<BatchNormSync>& sync,
                                  const Tensor& conv_weight, const Conv2dParams& p, bool conv_sums);

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

// ---- batch augmentation: mixup, cutmix, random erasing; the soft-target loss -----------
// On input batches, not differentiable (the draws: data/transforms/batch_augment.h). x (N, C, H, W) in
// either format; CPU: f32, f64; CUDA: also bf16, f16 (computed in float, rounded once).
struct ImageBox {  // rows [y1, y2), columns [x1, x2) of every channel of an image
  int64_t y1 = 0, y2 = 0, x1 = 0, x2 = 0;
  bool empty() const { return y2 <= y1 || x2 <= x1; }
  int64_t area() const { return empty() ? 0 : (y2 - y1) * (x2 - x1); }
};
// y[n] = lam x[n] + (1 - lam) x[(n + N - 1) % N] inside `box` (within the image), x[n] outside:
// mixup with box = the whole image; cutmix with lam = 0 (image n - 1's box copied exactly).
Tensor mix_with_rolled(const Tensor& x, double lam, const ImageBox& box);
// labels i64 (N) in [0, C) -> (N, C) of `dtype` on the labels' device, row n =
// lam onehot(labels[n]) + (1 - lam) onehot(labels[(n + N - 1) % N]). A bad CUDA label gives a
// NaN row (Note [CUDA target validation]); a bad CPU one throws.
Tensor mix_targets(const Tensor& labels, int64_t num_classes, double lam, DType dtype = DType::f32);
// In place: x[n, :, box] = value for the N host boxes (empty ones leave image n as it is); on
// CUDA the boxes travel as kernel arguments (no copy, no synchronisation).
void erase_boxes_(const Tensor& x, const std::vector<ImageBox>& boxes, double value = 0.0);
// PyTorch's CrossEntropyLoss(label_smoothing=e) with probability targets, logits and
// target (N, K): t' = (1 - e) t + e / K, loss = mean_n(-sum_k t'[n, k] log_softmax(x)[n, k]),
// in the logits' dtype (the target converted to it); differentiable in the logits only.
Tensor cross_entropy_soft(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0);

// ---- tensor primitives: reductions over dims, shape, matmul, softmax, dropout ----
// Small differentiable pieces that layers are composed from (global average pooling is
// mean(x, {2, 3}, true), a squeeze-and-excitation gate is a few of them) on both backends:
// CPU f32/f64; CUDA f32/f64/bf16/f16 (the shape ops: any dtype). Dims may be negative
// (counted from the end). Each is checked by an f64 gradcheck and a GPU-vs-CPU test.
class Generator;

// sum / mean over `dims` (at least one; each at most once). keepdim keeps them as size 1.
// Works by logical dims on either memory format with no relayout
// (Note [Reductions over dims] in engine/ops/reduce.cc). The result's format: a 4-D keepdim
// result takes x's format (when only H, W or only C are reduced, as in (N, C, 1, 1) or
// (N, 1, H, W), both formats are the same memory and the result views as either); any other
// result is contiguous. Sums accumulate in double on the CPU, in float (f64: double) on
// CUDA, in an order fixed by the shape (deterministic). An empty sum is 0, an empty mean
// NaN.
Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim = false);
// The maximum over `dim` (which must not be empty), formats as for sum. The gradient goes to
// the first index holding the maximum (ties: the lowest index; NaN counts as the largest
// value), like PyTorch's max(dim).
Tensor max(const Tensor& x, int dim, bool keepdim = false);
// That index, as i64 (not differentiable).
Tensor argmax(const Tensor& x, int dim, bool keepdim = false);

// A differentiable view: like reshape but never copies; throws where x's layout does not
// allow one (a channels_last x unless its H = W = 1).
Tensor view(const Tensor& x, const Shape& shape);
// x in the contiguous format (differentiable; x itself when it already is).
Tensor contiguous(const Tensor& x);
// Dims reordered: result dim k is x's dim order[k]. Always a copy into a contiguous result
// (there are no strided views; Note [Shape ops copy] in engine/ops/shape.cc), except that a
// contiguous x with the identity order is returned as is.
Tensor permute(const Tensor& x, const std::vector<int>& order);
// Elements [start, start + length) of dim `dim`, copied; a 4-D result keeps x's format.
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);
// x cut along `dim` into pieces of the given sizes (which must add up to x.size(dim)), each
// a narrow (a copy). Note: each piece's backward writes a full-size gradient of x (zeros
// outside its slice), so k pieces cost k full tensors in backward.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim);
// Tensors of the same rank, dtype and device, equal except along `dim`, joined along it.
// The result is channels_last when every input is, else contiguous.
Tensor concat(const std::vector<Tensor>& tensors, int dim);

// (M, K) x (K, N) -> (M, N), or batched (B, M, K) x (B, K, N) -> (B, M, N) (no broadcasting).
// CPU: Eigen's GEMM; CUDA: cuBLAS (bf16/f16 accumulate in f32; f32 uses TF32 only when
// cuda::set_allow_tf32(true)). The backward runs the same GEMMs.
Tensor matmul(const Tensor& a, const Tensor& b);

// softmax / log_softmax over `dim`, max-subtracted (a row of -inf gives NaN, like PyTorch).
// The result has x's shape and format; the backward reads only the result, one pass each.
Tensor softmax(const Tensor& x, int dim);
Tensor log_softmax(const Tensor& x, int dim);

// Training: each element zeroed with probability p, the others scaled by 1 / (1 - p); the
// mask comes from g (Note [Dropout mask] in kernels/cpu/dropout.h: the same on CPU and CUDA
// for the same state, in either format) and g advances by numel(x) draws. Eval, p = 0 or an
// empty x: x itself, no draw. p = 1: x * 0, no draw. p must lie in [0, 1].
Tensor dropout(const Tensor& x, double p, bool training, Generator& g);

}  // namespace rt
