// Pooling on CUDA: the twins of kernels/cpu/pool.h (max_pool2d with int64 argmax, adaptive
// average pooling), NCHW or NHWC, f32/f64/bf16/f16 (16-bit types compute in float). The
// geometry (ceil_mode included) is computed by the op. Pointers are device pointers; work is
// queued on `stream`. Readable by the host compiler.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

struct Pool2dGeom {
  int64_t N, C, H, W, HO, WO;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;  // max pooling only
  bool nhwc;
};

// y = window max (padding counts as -inf; NaN propagates); idx = argmax as h*W + w within the
// input plane (-1 for a window with no input pixel, whose y is -inf). Ties keep the first
// pixel in (row, column) order, like the CPU.
void max_pool2d_forward(const Pool2dGeom& g, DType t, const void* x, void* y, int64_t* idx, cudaStream_t s);
// dx = sum of dy over the windows whose argmax is the pixel: a gather over input pixels (no
// atomics, deterministic), summed in the CPU's order (output rows, then columns).
void max_pool2d_backward(const Pool2dGeom& g, DType t, const void* dy, const int64_t* idx, void* dx, cudaStream_t s);

// Output cell (i, j) averages input rows [floor(i*H/HO), ceil((i+1)*H/HO)), likewise columns.
// HO = WO = 1 (the global pool of a ResNet head) takes a reduction fast path.
void adaptive_avg_pool2d_forward(const Pool2dGeom& g, DType t, const void* x, void* y, cudaStream_t s);
void adaptive_avg_pool2d_backward(const Pool2dGeom& g, DType t, const void* dy, void* dx, cudaStream_t s);

}  // namespace rt::cuda
