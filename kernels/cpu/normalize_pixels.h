// Image bytes -> model input on the CPU: y[n, c, h, w] = fma(x[n, h, w, c], scale[c], bias[c])
// with scale = 1 / (255 std) and bias = -mean / std, i.e. (x / 255 - mean) / std.
// The input is a loader batch, (N, H, W, C) uint8; the output is NCHW or NHWC (`nhwc_out`).
// The CUDA kernel (kernels/cuda/normalize_pixels.cu) uses the same fused multiply-add in
// f32, so both backends give the same bits.
#pragma once

#include <cstdint>

namespace rt::cpu {

template <typename T>
void normalize_pixels(const uint8_t* x, int64_t N, int64_t H, int64_t W, int64_t C, const T* scale, const T* bias,
                      bool nhwc_out, T* y);

}  // namespace rt::cpu
