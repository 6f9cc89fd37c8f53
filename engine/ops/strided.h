// Helpers for the ops that work on a tensor through its memory layout: the reductions over
// dims, softmax, dropout and the shape ops (internal to engine/ops).
//
// Note [Memory order of logical dims]
// A tensor's memory is a row-major array over its logical dims taken in memory order:
// (0, 1, ..., n-1) for a contiguous tensor, (N, H, W, C) = logical dims (0, 2, 3, 1) for a
// channels_last one. An op over logical dims works on the matching memory dims of that
// array, so it needs no relayout: a reduction over H, W of an NHWC tensor is the reduction
// of a row-major (N, H*W, C) array over its middle dim, and a softmax over C of an NCHW
// tensor one over the middle dim of (N, C, H*W).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace rt::ops {

// The logical dim stored at each memory position, outermost
// first (Note [Memory order of logical dims]).
std::vector<int> memory_order(const Tensor& x);

// dim in [-ndim, ndim) -> [0, ndim); an rt::Error naming the op otherwise.
int wrap_dim(int dim, int ndim, const char* op);

// x's memory viewed as a row-major (outer, n, inner) array around logical dim `dim`.
struct Around {
  int64_t outer = 1, n = 1, inner = 1;
};
Around around_dim(const Tensor& x, int dim);

// dst[i] <- src[i] for every index i of `shape`, both read through per-dim strides (in
// elements, from the tensors' data pointers plus the given offsets); a src stride of 0
// broadcasts. Same dtype and device; any dtype (the bits are copied). Dims of size 1 are
// dropped and adjacent dims that are contiguous in both merged before the kernel runs
// (kernels/cpu/strided_copy.h, kernels/cuda/strided_copy.h).
void strided_copy(const Shape& shape, const Tensor& src, int64_t src_offset, const std::vector<int64_t>& src_strides,
                  const Tensor& dst, int64_t dst_offset, const std::vector<int64_t>& dst_strides);

// x's logical strides, for strided_copy (strides_of its shape and format).
inline std::vector<int64_t> strides(const Tensor& x) { return strides_of(x.shape(), x.format()); }

// A new tensor of `shape` in `format` (contiguous unless 4-D) holding src's values read
// through `src_strides` (a logical-order copy: permute, narrow, broadcast).
Tensor gather_copy(const Tensor& src, const Shape& shape, int64_t src_offset, const std::vector<int64_t>& src_strides,
                   MemoryFormat format = MemoryFormat::contiguous);

}  // namespace rt::ops
