// distributed/reduce_kernel_cuda.h: the all-reduce algorithms' local step on the
// communicator's stream. Sums and scales are the engine's elementwise kernels
// (kernels/cuda/elementwise.cuh); the maximum is the one kernel of our own here.
#include "distributed/reduce_kernel_cuda.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace rt::dist {
namespace {

using cuda::detail::acc_t;
using cuda::detail::from_acc;
using cuda::detail::to_acc;

// ---- kernels ---------------------------------------------------------------------------

// inout[i] = max(inout[i], in[i]); NaN in either operand gives NaN (like torch.maximum).
template <typename T>
__global__ void max_into(int64_t n, const T* __restrict__ in, T* __restrict__ inout) {
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const A a = to_acc(inout[i]), b = to_acc(in[i]);
    inout[i] = from_acc<T>((a != a || b != b) ? a + b : (a < b ? b : a));
  }
}

// ---- launchers -------------------------------------------------------------------------

constexpr int kThreads = 256;

}  // namespace

void reduce_cuda(ReduceOp op, DType t, int64_t n, const void* in, void* inout, cudaStream_t stream) {
  RT_CHECK(n >= 0, "reduce_cuda: negative element count ", n);
  if (n == 0) return;
  switch (op) {
    case ReduceOp::sum: return cuda::binary(cuda::Binary::add, t, n, inout, in, inout, stream);
    case ReduceOp::max:
      return cuda::detail::dispatch_floating(t, "reduce_cuda", [&](auto z) {
        using T = decltype(z);
        RT_LAUNCH(cuda::detail::grid_for(n, kThreads), kThreads, 0, stream, max_into<T>)(n, static_cast<const T*>(in),
                                                                                     static_cast<T*>(inout));
        CUDA_CHECK_LAUNCH();
      });
    case ReduceOp::avg: break;
  }
  RT_FAIL("reduce_cuda: ", reduce_op_name(op), " is not a local reduction (an average is a sum, then scale_cuda)");
}

void scale_cuda(DType t, int64_t n, void* x, double s, cudaStream_t stream) {
  if (n > 0) cuda::affine(t, n, x, s, 0.0, x, stream);
}

}  // namespace rt::dist
