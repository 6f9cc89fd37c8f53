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

// y = (x - mean) * invstd * gamma + beta; gamma/beta may be null (1 and 0).
template <typename T>
void batch_norm_apply(const BatchNormGeom& g, const T* x, const double* mean, const double* invstd, const T* gamma,
                      const T* beta, T* y);

// Backward. With training, mean/invstd are the batch's and the gradient flows through
// them; otherwise they are constants (running statistics). dx, dgamma, dbeta may be null.
template <typename T>
void batch_norm_backward(const BatchNormGeom& g, const T* x, const T* dy, const double* mean, const double* invstd,
                         const T* gamma, bool training, T* dx, T* dgamma, T* dbeta);

// Note [Fused batch_norm + relu]: the tail of a ResNet block, relu(bn(x) [+ residual]), in
// the one elementwise pass of batch_norm_apply. Its backward needs only the output y: the
// relu passes dy where y > 0, so the backward reads dz = (y > 0 ? dy : 0) in place of dy.
// dz is never stored, except as the residual's gradient, which it is: then the pass of the
// sums writes it and the dx pass reads it back instead of dy and y.

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
