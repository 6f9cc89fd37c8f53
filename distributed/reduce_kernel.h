// The local step of the all-reduce algorithms (distributed/allreduce_algos.h) on the CPU:
// inout = op(inout, in) elementwise over n contiguous elements, and the 1/N of an average,
// with the project's elementwise kernels (kernels/cpu/elementwise.h). `op` is sum or max
// (an average is a sum, then scale_cpu). The CUDA twins: distributed/reduce_kernel_cuda.h.
#pragma once

#include <cstdint>

#include "distributed/communicator_ops.h"
#include "base/dtype.h"

namespace rt::dist {

// f32 and f64 (rt::Error otherwise). Runs now, on the calling thread alone
// (Note [One thread for the local reduce] in reduce_kernel_cpu.cc).
void reduce_cpu(ReduceOp op, DType t, int64_t n, const void* in, void* inout);
void scale_cpu(DType t, int64_t n, void* x, double s);

}  // namespace rt::dist
