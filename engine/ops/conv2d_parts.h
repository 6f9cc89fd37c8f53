// conv2d's pieces that another op built on a convolution shares (internal to engine/ops):
// the argument checks and geometry, the cost formula, the plan key, the workspace and one
// cuDNN call. batch_norm_relu_conv2d (engine/ops/batch_norm_relu_conv2d.cc) is the other user.
#pragma once

#include <cstddef>

#include "engine/ops.h"
#include "engine/profiler.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cuda/conv2d.h"

namespace rt::ops {

// conv2d's checks of x, weight, bias and p (errors name `op`), and the geometry they give.
cpu::Conv2dGeom conv2d_geom(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const Conv2dParams& p);
// The profiler's cost of a convolution of geometry g in dtype t, forward and backward.
prof::OpCost conv2d_cost(const cpu::Conv2dGeom& g, DType t);
// The plan key of one cuDNN convolution of geometry g on like's device and dtype (the x/w/y
// slots of kernels/cuda/conv2d.h, for the pointers' alignment).
cuda::ConvKey conv_key(cuda::ConvKind kind, const cpu::Conv2dGeom& g, const Tensor& like, const void* x, const void* w,
                       const void* y, bool accumulate);
// The device's cuDNN workspace of at least `bytes` (Note [Conv workspace] in engine/ops/conv2d.cc).
void* conv_workspace(Device d, size_t bytes);
// One cuDNN convolution (x or dx, w or dw, y or dy) on like's stream; `accumulate`: added to
// what the output holds (beta = 1).
void cuda_conv(cuda::ConvKind kind, const cpu::Conv2dGeom& g, const Tensor& like, const void* x, const void* w,
               const void* y, bool accumulate = false);

}  // namespace rt::ops
