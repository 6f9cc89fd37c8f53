// batch_norm's pieces that another op built on a batch norm shares (internal to
// engine/ops): the argument checks and the CUDA statistics. batch_norm_relu_conv2d
// (engine/ops/batch_norm_relu_conv2d.cc) is the other user.
#pragma once

#include <memory>

#include "engine/ops.h"
#include "kernels/cuda/batch_norm.h"

namespace rt::ops {

// batch_norm's checks of x, the parameters, the running statistics, eps and the channel sums
// (errors name `op`; a residual is the caller's to check); x's geometry.
cuda::BatchNormGeom batch_norm_check(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& running_mean, const Tensor& running_var, double eps,
                                     const ChannelSums& sums);

// The statistics a CUDA batch norm normalises with, (C,) in the statistics dtype on x's
// device: training, from the convolution's sums, every process's moments (sync) or a pass
// over x, the running statistics updated; eval, from the running statistics. count: the
// global count (1,) f64 with sync, else undefined. Nothing is read on the host.
struct BatchNormCudaStats {
  Tensor mean, invstd, count;
};
BatchNormCudaStats batch_norm_cuda_stats(const char* op, const Tensor& x, Tensor running_mean, Tensor running_var,
                                         bool training, double momentum, double eps, const cuda::BatchNormGeom& g,
                                         const std::shared_ptr<BatchNormSync>& sync, const ChannelSums& sums);

// A batch-norm parameter in the statistics dtype st
// (Note [Batch norm parameters in the statistics dtype] in kernels/cuda/batch_norm.h): as it
// is when it already is, else a detached copy (the caller converts the gradient back).
Tensor batch_norm_param_in(const Tensor& p, DType st);

}  // namespace rt::ops
