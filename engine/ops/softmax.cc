// softmax and log_softmax over one dim, max-subtracted, on the input's memory with no
// relayout (Note [Memory order of logical dims] in engine/ops/strided.h): the result has x's
// shape and format. The backward reads only the output: one pass per row each
// (kernels/cpu/softmax.h).
#include "kernels/cpu/softmax.h"
#include "kernels/cuda/softmax.h"

#include "engine/ops.h"
#include "engine/ops/op_util.h"
#include "engine/ops/strided.h"

namespace rt {
namespace {

Tensor softmax_impl(const Tensor& x, int dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_defined(x, op, "x");
  const int d = ops::wrap_dim(dim, x.ndim(), op);
  if (x.device().is_cuda()) {
    RT_CHECK(is_floating(x.dtype()), op, ": x must be f32, f64, bf16 or f16 on CUDA, got ", dtype_name(x.dtype()));
  } else {
    check_float(x, op, "x");
  }
  // Cost: per element max, subtract, exp, add and a divide (or log) ~ 5 flops, x read and y
  // written; back: a multiply-add for the sum and ~3 for dx, y and dy read, dx written.
  RT_PROFILE_OP(op, ops::elementwise_cost(x, 1, 1, 5, 2, 1, 4), &x);
  const ops::Around a = ops::around_dim(x, d);
  Tensor y = ops::empty_like(x);
  if (x.device().is_cuda()) {
    cuda::softmax_forward(x.dtype(), log, a.outer, a.n, a.inner, x.raw_data(), y.raw_data(), ops::stream_of(x));
  } else {
    ops::dispatch_float(x.dtype(), op, [&](auto z) {
      using T = decltype(z);
      cpu::softmax_forward<T>(log, a.outer, a.n, a.inner, x.data<T>(), y.data<T>());
    });
  }
  if (!any_requires_grad({x})) return y;
  record(op, y, {x}, [saved_y = y.detach(), log, a](const Tensor& g_in, const std::vector<bool>&) {
    const Tensor g = ops::in_format(g_in, saved_y.format());  // the same memory order as y
    Tensor dx = ops::empty_like(saved_y);
    if (g.device().is_cuda()) {
      cuda::softmax_backward(g.dtype(), log, a.outer, a.n, a.inner, saved_y.raw_data(), g.raw_data(), dx.raw_data(),
                             ops::stream_of(g));
    } else {
      ops::dispatch_float(g.dtype(), log ? "log_softmax backward" : "softmax backward", [&](auto z) {
        using T = decltype(z);
        cpu::softmax_backward<T>(log, a.outer, a.n, a.inner, saved_y.data<T>(), g.data<T>(), dx.data<T>());
      });
    }
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int dim) { return softmax_impl(x, dim, true); }

}  // namespace rt
