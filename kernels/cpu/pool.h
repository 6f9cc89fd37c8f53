// Pooling on the CPU: max_pool2d (with argmax for backward) and adaptive average pooling,
// NCHW or NHWC.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rt::cpu {

struct Pool2dGeom {
  int64_t N, C, H, W, HO, WO;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;  // max pooling only
  bool nhwc;
};

// y = window max (padding counts as -inf; NaN propagates, like PyTorch); idx = argmax as
// h*W + w within the input plane.
template <typename T>
void max_pool2d_forward(const Pool2dGeom& g, const T* x, T* y, int64_t* idx);
// dx = 0, then dx[plane][idx] += dy.
template <typename T>
void max_pool2d_backward(const Pool2dGeom& g, const T* dy, const int64_t* idx, T* dx);

// Output cell (i, j) averages input rows [floor(i*H/HO), ceil((i+1)*H/HO)), likewise columns.
template <typename T>
void adaptive_avg_pool2d_forward(const Pool2dGeom& g, const T* x, T* y);
template <typename T>
void adaptive_avg_pool2d_backward(const Pool2dGeom& g, const T* dy, T* dx);

}  // namespace rt::cpu
