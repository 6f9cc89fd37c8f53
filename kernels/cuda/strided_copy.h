// The generic strided copy on CUDA: the twin of kernels/cpu/strided_copy.h, the shape ops'
// one kernel (permute, contiguous, concat, split/narrow, the reductions' broadcast back).
// Pointers are device pointers; work is queued on `s`. Readable by the host compiler.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/stream.h"

namespace rt::cuda {

// The most dims a copy may have after the caller dropped size-1 dims and merged contiguous
// ones (engine/ops/strided.cc); 8 covers any permutation of an 8-D tensor.
inline constexpr int kMaxCopyDims = 8;

// dst[sum_k i_k dst_stride[k]] = src[sum_k i_k src_stride[k]] for every index of size[];
// strides in elements of elem_bytes (1, 2, 4 or 8) bytes. One thread per element in
// row-major index order, so writes coalesce when the last dim is dst's contiguous one.
void strided_copy(size_t elem_bytes, int ndim, const int64_t* size, const int64_t* src_stride,
                  const int64_t* dst_stride, const void* src, void* dst, cudaStream_t s);

}  // namespace rt::cuda
