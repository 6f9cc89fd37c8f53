// The multi-tensor apply (Note [Multi-tensor apply] in kernels/cuda/multi_tensor_plan.h):
// one kernel template that walks a MultiTensorTable's chunks, and its launcher. Included by
// the .cu files of the ops that use it (optim.cu, grad_norm.cu, loss_scale.cu, ema.cu).
//
// An op is a functor with
//   __device__ void operator()(const MtaRow& row, int64_t chunk, int64_t begin, int64_t end) const;
// called by every thread of a block for each chunk the block walks (the same calls in every
// thread of the block, so the op may use __syncthreads and block reductions); it handles the
// elements [begin, end) of row's tensor, threadIdx.x, threadIdx.x + blockDim.x, ...
#pragma once

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/multi_tensor_table.h"

namespace rt::cuda {

inline constexpr int kMtaThreads = 256;

template <typename Op>
__global__ void multi_tensor_kernel(MtaView v, int64_t chunk_begin, int64_t chunk_end, Op op) {
  for (int64_t c = chunk_begin + blockIdx.x; c < chunk_end; c += gridDim.x) {
    const MtaRow& row = v.rows[v.chunk_tensor[c]];
    const int64_t begin = (c - row.first_chunk) * kMtaChunk, end = begin + kMtaChunk;
    op(row, c, begin, end < row.n ? end : row.n);
  }
}

// The elements of one chunk this thread handles.
#define RT_MTA_FOR(i, begin, end) for (int64_t i = (begin) + threadIdx.x; i < (end); i += blockDim.x)

// One launch per range of `table` (one in all unless its rows carry more than
// kMtaMaxGroups scalar sets): `set_groups(op, range.groups)` fills the op's scalar sets for
// the range before its launch. `flops`: the op's arithmetic per element, for the kernel lab
// (`f64`: at FP64's rate).
template <typename Op, typename SetGroups>
void multi_tensor_apply(MultiTensorTable& table, Op op, SetGroups&& set_groups, double flops, bool f64,
                        cudaStream_t s) {
  const MtaView v = table.view();
  for (const MtaRange& r : table.ranges()) {
    set_groups(op, r.groups);
    flops_hint(flops * double(r.elements), f64);
    const int grid = int(std::min<int64_t>(r.chunk_end - r.chunk_begin, kMtaMaxBlocks));
    RT_LAUNCH(grid, kMtaThreads, 0, s, multi_tensor_kernel<Op>)(v, r.chunk_begin, r.chunk_end, op);
    CUDA_CHECK_LAUNCH();
  }
  if (!table.ranges().empty()) table.used_on(s);
}

// For ops without per-tensor scalars.
struct NoGroups {
  template <typename Op>
  void operator()(Op&, const std::vector<int>&) const {}
};

}  // namespace rt::cuda
