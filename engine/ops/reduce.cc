// Full reductions: sum and mean to a 0-D tensor.
#include "kernels/cpu/elementwise.h"

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {
namespace {

Tensor reduce(const Tensor& x, double scale, const char* op) {
  check_defined(x, op, "x");
  check_cpu_only(x, op);
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
