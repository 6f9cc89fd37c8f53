// Shape ops: reshape, flatten, and the differentiable memory-format change.
#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {

Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined(x, "reshape", "x");
  const bool viewable =
      x.format() == MemoryFormat::contiguous || (x.ndim() == 4 && x.size(2) == 1 && x.size(3) == 1);
  Tensor y = viewable ? x.view(shape) : x.contiguous().view(shape);
  record("reshape", y, {x}, [in = x.shape()](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g.contiguous().view(in)};
  });
  return y;
}

Tensor flatten(const Tensor& x, int start_dim) {
  check_defined(x, "flatten", "x");
  const int n = x.ndim();
  const int s = start_dim < 0 ? start_dim + n : start_dim;
  RT_CHECK(s >= 0 && s < std::max(n, 1), "flatten: start_dim ", start_dim, " out of range for ", x.str());
  Shape shape(x.shape().begin(), x.shape().begin() + s);
  int64_t rest = 1;
  for (int i = s; i < n; ++i) rest *= x.shape()[i];
  shape.push_back(rest);
  return reshape(x, shape);
}

Tensor to_format(const Tensor& x, MemoryFormat f) {
  check_defined(x, "to_format", "x");
  // Cost: x read and written in the other layout, both ways (the copy is Tensor::copy_'s).
  RT_PROFILE_OP("to_format", ops::elementwise_cost(x, 0, 0, 0), &x);
  Tensor y = x.to(f);
  if (y.same(x)) return x;
  // A fresh tensor: it must not share autograd state with x.
  y = y.detach();
  record("to_format", y, {x}, [from = x.format()](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{ops::in_format(g, from)};
  });
  return y;
}

}  // namespace rt
