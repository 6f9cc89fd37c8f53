// Full reduction on CUDA: y[0] = scale * sum(x[0:n]), written to device memory in x's dtype
// (never read on the host). Accumulates in float for f32/bf16/f16 and in double for f64.
// Deterministic: a fixed grid of kSumBlocks partial sums, then one block sums those in a
// fixed order, so the same input gives the same bits on every run.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

inline constexpr int kSumBlocks = 256;
// `partials`: device scratch of kSumBlocks doubles (8 bytes each whatever the dtype).
void sum(DType t, int64_t n, const void* x, double scale, void* y, void* partials, cudaStream_t s);

}  // namespace rt::cuda
