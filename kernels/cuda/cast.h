// dtype conversion on CUDA: dst[i] = convert(src[i]) for n contiguous elements. Supported:
// any pair of f32, f64, bf16, f16 (round-to-nearest-even, like the host conversion in
// base/dtype.h), and u8 -> f32 (image bytes). Same layout on both sides.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include <vector>

#include "kernels/cuda/multi_tensor_table.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

bool cast_supported(DType from, DType to);
void cast(DType from, DType to, int64_t n, const void* src, void* dst, cudaStream_t s);

// A list of casts of one dtype pair in one launch (Note [Multi-tensor apply] in
// kernels/cuda/multi_tensor_plan.h): dst = convert(src), or with `accumulate`
// dst += convert(src), the sum in dst's compute type (float for f32, double for f64) and
// rounded once, as add_(dst, src.to(dst dtype)) is. What mixed precision's working copies
// need (engine/nn/compute_copies.h): the masters cast to the copies, the copies' gradients
// added to the masters'. `from` and `to` differ (a same-dtype list is a copy). `table`: the
// list's device copy, kept for the next call.
struct CastTensor {
  const void* src = nullptr;  // n elements of `from`
  void* dst = nullptr;        // n elements of `to`, same layout
  int64_t n = 0;
  bool accumulate = false;
};
void cast_many(DType from, DType to, const std::vector<CastTensor>& list, MultiTensorTable& table, cudaStream_t s);

}  // namespace rt::cuda
