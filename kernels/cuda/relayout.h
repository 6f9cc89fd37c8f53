// Memory-format changes on CUDA: NCHW <-> NHWC of a 4-D tensor without a host round trip.
// Both are batched matrix transposes: per image, NCHW is a (C, H*W) matrix and NHWC its
// transpose (H*W, C). Any element type of 1, 2, 4 or 8 bytes (the bits are moved, never
// converted). The CPU twin is host_copy in engine/tensor.cc. Readable by the host compiler.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/stream.h"

namespace rt::cuda {

// dst[n][k][r] = src[n][r][k] for n < batch, r < rows, k < cols; elem_bytes in {1, 2, 4, 8}.
// NCHW -> NHWC: rows C, cols H*W; NHWC -> NCHW: rows H*W, cols C.
void transpose_batched(size_t elem_bytes, int64_t batch, int64_t rows, int64_t cols, const void* src, void* dst,
                       cudaStream_t s);

}  // namespace rt::cuda
