// The local step of the all-reduce algorithms (dist/allreduce_algos.h): inout = op(inout,
// in) elementwise over n contiguous elements, and the 1/N of an average. On the CPU the
// project's elementwise kernels (kernels/cpu/elementwise.h) do the sums; on CUDA our kernel
// (dist/reduce_kernel.cu) runs on the communicator's stream. `op` is sum or max (an average
// is a sum, then scale()).
#pragma once

#include <cstdint>

#include "dist/communicator_ops.h"
#include "engine/dtype.h"
#include "kernels/cuda/stream.cuh"

namespace rt::dist {

// f32 and f64 (rt::Error otherwise). Runs now, on the calling thread.
void reduce_cpu(ReduceOp op, DType t, int64_t n, const void* in, void* inout);
void scale_cpu(DType t, int64_t n, void* x, double s);

// f32, f64, bf16 and f16; 16-bit types are widened to float and rounded once. Queued on
// `stream` (device pointers); nothing waits for it.
void reduce_cuda(ReduceOp op, DType t, int64_t n, const void* in, void* inout, cudaStream_t stream);
void scale_cuda(DType t, int64_t n, void* x, double s, cudaStream_t stream);

}  // namespace rt::dist
