// conv2d on the CPU, NCHW and NHWC, any stride/padding/dilation/groups: f32 through oneDNN
// (conv2d_onednn.h; cpu::set_conv_algo chooses), f64 and the reference through im2col +
// Eigen GEMM.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rt::cpu {

struct Conv2dGeom {
  int64_t N, C, H, W;   // input x
  int64_t O, KH, KW;    // weight (O, C/groups, KH, KW)
  int64_t HO, WO;       // output y (N, O, HO, WO)
  int64_t sh, sw, ph, pw, dh, dw, groups;
  bool nhwc;            // x, y (and dy, dx) are NHWC in memory, else NCHW
  bool weight_ohwi;     // weight (and dw) memory is (O, KH, KW, C/g), else (O, C/g, KH, KW)
};

// y = conv(x, w) + bias (bias may be null).
template <typename T>
void conv2d_forward(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y);

// Gradients: dx (input), dw (weight), db (bias); each may be null when not needed.
// Each requested gradient is overwritten, not accumulated.
template <typename T>
void conv2d_backward(const Conv2dGeom& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db);

// db[o] = the sum of dy over N, H and W (summed in double): the bias gradient.
template <typename T>
void conv2d_bias_grad(const Conv2dGeom& g, const T* dy, T* db);

// The im2col + GEMM implementation, whatever the algorithm setting: the reference.
template <typename T>
void im2col_conv2d_forward(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y);
template <typename T>
void im2col_conv2d_backward(const Conv2dGeom& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db);

}  // namespace rt::cpu
