// f32 convolutions on the CPU through oneDNN (Debian's libdnnl, the library PyTorch's CPU
// convolutions use), forward and both gradients, NCHW and NHWC, any stride, padding,
// dilation and groups. The im2col + GEMM kernels of conv2d.cc stay the reference: f64 runs
// there always, and tests check these against them (tests/conv2d_onednn_test.cc).
// Note [oneDNN convolutions] in conv2d_onednn.cc says how layouts and plans are chosen.
#pragma once

#include <string>

#include "kernels/cpu/conv2d.h"

namespace rt::cpu {

// Which implementation runs f32 convolutions on the CPU (oneDNN by default; im2col in a
// build without oneDNN, where the oneDNN functions below return false). Process-wide; set
// it before training, not while a convolution runs.
enum class ConvAlgo { onednn, im2col };
void set_conv_algo(ConvAlgo a);
ConvAlgo conv_algo();
const char* conv_algo_name(ConvAlgo a);

// y = conv(x, w) + bias (bias may be null). False when oneDNN has no implementation for this
// geometry (nothing was written; use the reference). Throws rt::Error naming the oneDNN
// call and its file:line on any other oneDNN failure.
bool onednn_conv2d_forward(const Conv2dGeom& g, const float* x, const float* w, const float* bias, float* y);

// dx, dw, db (each may be null): overwritten, like conv2d_backward. False as above.
bool onednn_conv2d_backward(const Conv2dGeom& g, const float* x, const float* w, const float* dy, float* dx, float* dw,
                            float* db);

// oneDNN's name for the implementation it chose for this forward convolution (e.g.
// "brgconv:avx512_core"), for benchmarks and profiles; "" when it has none.
std::string onednn_conv2d_impl(const Conv2dGeom& g);

}  // namespace rt::cpu
