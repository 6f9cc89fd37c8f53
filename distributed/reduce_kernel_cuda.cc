// distributed/reduce_kernel_cuda.h: the all-reduce algorithms' local step on the
// communicator's stream, with the engine's elementwise kernels (kernels/cuda/elementwise.h):
// a sum is binary add, the maximum is maximum, the 1/N of an average is affine. Host code:
// every CUDA kernel lives in kernels/cuda.
#include "distributed/reduce_kernel_cuda.h"

#include "base/error.h"
#include "kernels/cuda/elementwise.h"

namespace rt::dist {

void reduce_cuda(ReduceOp op, DType t, int64_t n, const void* in, void* inout, cudaStream_t stream) {
  RT_CHECK(n >= 0, "reduce_cuda: negative element count ", n);
  if (n == 0) return;
  switch (op) {
    case ReduceOp::sum: return cuda::binary(cuda::Binary::add, t, n, inout, in, inout, stream);
    case ReduceOp::max: return cuda::maximum(t, n, inout, in, inout, stream);
    case ReduceOp::avg: break;
  }
  RT_FAIL("reduce_cuda: ", reduce_op_name(op), " is not a local reduction (an average is a sum, then scale_cuda)");
}

void scale_cuda(DType t, int64_t n, void* x, double s, cudaStream_t stream) {
  if (n > 0) cuda::affine(t, n, x, s, 0.0, x, stream);
}

}  // namespace rt::dist
