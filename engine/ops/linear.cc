// linear: y = x W^T + b, PyTorch's weight layout (out, in). Kernels: kernels/cpu/linear.cc
// (f32, f64) and kernels/cuda/linear.cu (cuBLAS; f32, f64, bf16, f16).
#include "kernels/cpu/linear.h"
#include "kernels/cuda/linear.h"

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {

using ops::data_or_null;
using ops::raw_or_null;

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* op = "linear";
  check_ndim(x, 2, op, "input");
  check_ndim(weight, 2, op, "weight");
  if (x.device().is_cuda()) {
    RT_CHECK(is_floating(x.dtype()), op, ": input must be f32, f64, bf16 or f16 on CUDA, got ", dtype_name(x.dtype()));
  } else {
    check_float(x, op, "input");
  }
  check_same_dtype(x, weight, op);
  check_same_device(x, weight, op);
  const int64_t N = x.size(0), in = x.size(1), out = weight.size(0);
  RT_CHECK(weight.size(1) == in, op, ": input has ", in, " features but weight ", weight.str(), " expects ",
           weight.size(1));
  if (bias.defined()) {
    check_same_dtype(x, bias, op);
    check_same_device(x, bias, op);
    RT_CHECK(bias.shape() == Shape{out}, op, ": bias must be [", out, "], got ", bias.str());
  }
  // Cost: N*in*out multiply-adds forward, twice that back (dx, dw); bytes: x, W, y; dy twice, x, W, dx, dW.
  const auto cost = [&] {
    const double macs = double(N) * double(in) * double(out);
    const double xb = ops::nbytes_of(N * in, x.dtype()), wb = ops::nbytes_of(out * in, x.dtype()),
                 yb = ops::nbytes_of(N * out, x.dtype());
    return prof::OpCost{{2 * macs, xb + wb + yb}, {4 * macs, 2 * yb + 2 * xb + 2 * wb}};
  };
  RT_PROFILE_OP(op, cost(), &x, &weight);
  Tensor y = Tensor::empty({N, out}, x.dtype(), x.device());
  if (x.device().is_cuda()) {
    cuda::linear_forward(x.dtype(), N, in, out, x.raw_data(), weight.raw_data(),
                         raw_or_null(bias), y.raw_data(), ops::stream_of(x));
  } else {
    ops::dispatch_float(x.dtype(), op, [&](auto z) {
      using T = decltype(z);
      cpu::linear_forward<T>(N, in, out, x.data<T>(), weight.data<T>(), data_or_null<T>(bias),
                             y.data<T>());
    });
  }
  const Tensor saved_x = weight.requires_grad() ? x.detach() : Tensor();
  const Tensor saved_w = x.requires_grad() ? weight.detach() : Tensor();
  record(op, y, {x, weight, bias}, [N, in, out, saved_x, saved_w](const Tensor& dy, const std::vector<bool>& needs) {
    Tensor dx = needs[0] ? Tensor::empty({N, in}, dy.dtype(), dy.device()) : Tensor();
    Tensor dw = needs[1] ? Tensor::empty({out, in}, dy.dtype(), dy.device()) : Tensor();
    Tensor db = needs[2] ? Tensor::empty({out}, dy.dtype(), dy.device()) : Tensor();
    if (dy.device().is_cuda()) {
      cuda::linear_backward(dy.dtype(), N, in, out, raw_or_null(saved_x),
                            raw_or_null(saved_w), dy.raw_data(),
                            raw_or_null(dx), raw_or_null(dw),
                            raw_or_null(db), ops::stream_of(dy));
      return std::vector<Tensor>{dx, dw, db};
    }
    ops::dispatch_float(dy.dtype(), "linear backward", [&](auto z) {
      using T = decltype(z);
      cpu::linear_backward<T>(N, in, out, data_or_null<T>(saved_x),
                              data_or_null<T>(saved_w), dy.data<T>(),
                              data_or_null<T>(dx), data_or_null<T>(dw),
                              data_or_null<T>(db));
    });
    return std::vector<Tensor>{dx, dw, db};
  });
  return y;
}

}  // namespace rt
