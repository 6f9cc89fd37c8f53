// Image bytes -> model input on CUDA: the first kernel of every step. The loader ships
// batches as (N, H, W, C) uint8, a quarter of the f32 bytes over PCIe; this kernel turns
// them into (x / 255 - mean) / std as fma(x, scale[c], bias[c]) (the CPU twin,
// kernels/cpu/normalize_pixels.h, computes the same expression) in the output dtype
// (f32, f64, bf16 or f16; 16-bit outputs compute in f32 and round once), laid out NCHW or
// NHWC. Readable by the host compiler.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

inline constexpr int kMaxPixelChannels = 8;

// scale, bias: C host values (C <= kMaxPixelChannels), passed to the kernel by value.
void normalize_pixels(const uint8_t* x, int64_t N, int64_t H, int64_t W, int64_t C, const double* scale,
                      const double* bias, bool nhwc_out, DType out, void* y, cudaStream_t s);

}  // namespace rt::cuda
