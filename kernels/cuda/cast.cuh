// dtype conversion on CUDA: dst[i] = convert(src[i]) for n contiguous elements. Supported:
// any pair of f32, f64, bf16, f16 (round-to-nearest-even, like the host conversion in
// base/dtype.h), and u8 -> f32 (image bytes). Same layout on both sides.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.cuh"

namespace rt::cuda {

bool cast_supported(DType from, DType to);
void cast(DType from, DType to, int64_t n, const void* src, void* dst, cudaStream_t s);

}  // namespace rt::cuda
