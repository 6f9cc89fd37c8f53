// batch_norm on the CPU: per-channel statistics over (N, spatial), NCHW or NHWC.
// Statistics are accumulated in double whatever T is.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rt::cpu {

struct BatchNormGeom {
  int64_t N, C, S;  // S = spatial size (H*W; 1 for (N, C) inputs)
  bool nhwc;        // element (n, c, s) at (n*S + s)*C + c, else (n*C + c)*S + s
};

// Batch statistics: mean and biased variance per channel.
template <typename T>
void batch_norm_stats(const BatchNormGeom& g, const T* x, double* mean, double* var);

// The same statistics from per-channel sums of x and x^2 over `count` values each (a
// convolution's, Note [Statistics from the convolution] in engine/ops/batch_norm.cc): mean =
// sum / count, var = max(sqsum / count - mean^2, 0) in double; the reference of
// cuda::batch_norm_stats_from_sums.
void batch_norm_stats_from_sums(int64_t C, int64_t count, const float* sum, const float* sqsum, double* mean,
                                double* var);

// Batch norm + relu as the next convolution's prologue x' = relu(x * scale + bias)
// (Note [Batch norm as the next convolution's prologue] in engine/ops/batch_norm_relu_conv2d.cc),
// f32 with one rounding per operation, the references of the CUDA kernels: the coefficients
// scale = gamma * invstd and bias = beta - mean * scale (gamma, beta may be null: 1 and 0),
// and whether the relu keeps x, x * scale + bias > 0 (what its backward masks with).
void batch_norm_prologue_coefs(int64_t C, const float* mean, const float* invstd, const float* gamma,
                               const float* beta, float* scale, float* bias);
bool prologue_keeps(float x, float scale, float bias);

// The moments behind them: mean and m2 = sum((x - mean)^2) per channel (two passes), what
// processes combine (Note [Synchronised batch norm] in engine/ops/batch_norm_sync.h).
template <typename T>
void batch_norm_moments(const BatchNormGeom& g, const T* x, double* mean, double* m2);

// y = (x - mean) * invstd * gamma + beta; gamma/beta may be null (1 and 0).
template <typename T>
void batch_norm_apply(const BatchNormGeom& g, const T* x, const double* mean, const double* invstd, const T* gamma,
                      const T* beta, T* y);

// Backward. With training, mean/invstd are the batch's and the gradient flows through
// them; otherwise they are constants (running statistics). dx, dgamma, dbeta may be null.
// The two passes below, one after the other.
template <typename T>
void batch_norm_backward(const BatchNormGeom& g, const T* x, const T* dy, const double* mean, const double* invstd,
                         const T* gamma, bool training, T* dx, T* dgamma, T* dbeta);

// The backward in its two passes, so that the sums can be combined across processes in
// between (Note [Synchronised batch norm]).
// Pass 1: per channel sum_dz[c] and sum_dz_xmu[c] = sum(dz * (x - mean[c])), dz = dy, or
// with relu_y (the output of batch_norm_apply_relu) dz = (relu_y > 0 ? dy : 0); from them
// dgamma = invstd * sum_dz_xmu and dbeta = sum_dz (each may be null). dresidual (relu_y
// only; may be null) receives dz.
template <typename T>
void batch_norm_grad_sums(const BatchNormGeom& g, const T* x, const T* relu_y, const T* dy, const double* mean,
                          const double* invstd, double* sum_dz, double* sum_dz_xmu, T* dgamma, T* dbeta,
                          T* dresidual);
// Pass 2: dx = gamma * invstd * (dz - sum_dz / count - (x - mean) * invstd^2 * sum_dz_xmu / count)
// with training, gamma * invstd * dz without; `count`: the values per channel the sums and
// statistics are over (N*S, or every process's). dz from dy and relu_y as in pass 1; when
// pass 1 wrote dresidual, pass that as dy and relu_y = null (dz itself, read once).
template <typename T>
void batch_norm_backward_dx(const BatchNormGeom& g, const T* x, const T* relu_y, const T* dy, const double* mean,
                            const double* invstd, const T* gamma, bool training, double count, const double* sum_dz,
                            const double* sum_dz_xmu, T* dx);

// Note [Fused batch_norm + relu]
// The tail of a ResNet block, relu(bn(x) [+ residual]), in the one elementwise pass of
// batch_norm_apply. Its backward needs only the output y: the relu passes dy where y > 0,
// so the backward reads dz = (y > 0 ? dy : 0) in place of dy. dz is never stored, except as
// the residual's gradient, which it is: then the pass of the sums writes it and the dx pass
// reads it back instead of dy and y.

// y = max(0, (x - mean) * invstd * gamma + beta + residual); residual may be null (0),
// gamma/beta as in batch_norm_apply. NaN stays NaN, like relu.
template <typename T>
void batch_norm_apply_relu(const BatchNormGeom& g, const T* x, const T* residual, const double* mean,
                           const double* invstd, const T* gamma, const T* beta, T* y);

// batch_norm_backward of dz = (y > 0 ? dy : 0), y the output of batch_norm_apply_relu;
// dresidual (may be null) receives dz. dx, dgamma, dbeta may be null.
template <typename T>
void batch_norm_backward_relu(const BatchNormGeom& g, const T* x, const T* y, const T* dy, const double* mean,
                              const double* invstd, const T* gamma, bool training, T* dx, T* dgamma, T* dbeta,
                              T* dresidual);

}  // namespace rt::cpu
