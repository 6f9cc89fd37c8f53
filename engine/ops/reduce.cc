// Full reductions: sum and mean to a 0-D tensor.
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/reduce.cuh"

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {
namespace {

// On CUDA the result and its gradient stay on the device: no host read anywhere.
Tensor reduce_cuda(const Tensor& x, double scale, const char* op) {
  Tensor y = Tensor::empty({}, x.dtype(), x.device());
  Tensor partials = Tensor::empty({cuda::kSumBlocks}, DType::f64, x.device());  // scratch, 8 bytes a slot
  cuda::sum(x.dtype(), x.numel(), x.raw_data(), scale, y.raw_data(), partials.raw_data(), ops::stream_of(x));
  record(op, y, {x}, [shape = x.shape(), fmt = x.format(), scale](const Tensor& g, const std::vector<bool>&) {
    // Every input element receives g * scale, broadcast from the device scalar.
    Tensor dx = Tensor::empty(shape, g.dtype(), g.device(), fmt);
    cuda::fill_from_scalar(g.dtype(), dx.numel(), g.raw_data(), scale, dx.raw_data(), ops::stream_of(g));
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor reduce(const Tensor& x, double scale, const char* op) {
  check_defined(x, op, "x");
  // Cost: an add per element reading x; back: dx written.
  RT_PROFILE_OP(op, (prof::OpCost{{double(x.numel()), ops::nbytes_of(x.numel(), x.dtype())},
                                  {0, ops::nbytes_of(x.numel(), x.dtype())}}), &x);
  if (x.device().is_cuda()) return reduce_cuda(x, scale, op);
  const double s = ops::dispatch_float(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    return cpu::sum<T>(x.numel(), x.data<T>());
  });
  Tensor y = Tensor::full({}, s * scale, x.dtype(), x.device());
  record(op, y, {x}, [shape = x.shape(), fmt = x.format(), scale](const Tensor& g, const std::vector<bool>&) {
    // Every input element receives g * scale. (Host read of a CPU scalar.)
    return std::vector<Tensor>{Tensor::full(shape, g.item() * scale, g.dtype(), g.device(), fmt)};
  });
  return y;
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce(x, 1.0, "sum"); }

Tensor mean(const Tensor& x) {
  RT_CHECK(x.defined() && x.numel() > 0, "mean of an empty tensor");
  return reduce(x, 1.0 / double(x.numel()), "mean");
}

}  // namespace rt
