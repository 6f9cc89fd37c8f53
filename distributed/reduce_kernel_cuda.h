// The local step of the all-reduce algorithms on CUDA (distributed/reduce_kernel_cuda.cc): the twins of
// distributed/reduce_kernel.h for f32, f64, bf16 and f16 (16-bit types are widened to float and
// rounded once). Device pointers; queued on `stream`, nothing waits for it. Readable by the
// host compiler.
#pragma once

#include <cstdint>

#include "distributed/communicator_ops.h"
#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::dist {

// inout[0:n] = op(inout, in); op is sum or max.
void reduce_cuda(ReduceOp op, DType t, int64_t n, const void* in, void* inout, cudaStream_t stream);
// x[0:n] *= s.
void scale_cuda(DType t, int64_t n, void* x, double s, cudaStream_t stream);

}  // namespace rt::dist
