// Shape ops: reshape, view, flatten, the differentiable memory-format change, and the
// copying shape ops permute, contiguous, narrow, split and concat.
//
// Note [Shape ops copy]
// A tensor is contiguous or channels_last, nothing in between (no general strides), so
// permute, narrow/split and concat materialise their result through the one strided-copy
// kernel (engine/ops/strided.h); their backwards are the same copies the other way. reshape
// and view are free where the layout allows (Tensor::view).
#include <numeric>

#include "engine/ops.h"
#include "engine/ops/op_util.h"
#include "engine/ops/strided.h"

namespace rt {
namespace {

// Cost of a copying shape op: n elements read and written, both ways.
prof::OpCost copy_cost(int64_t n, DType t) {
  const double b = 2 * ops::nbytes_of(n, t);
  return {{0, b}, {0, b}};
}

// The format of a shape op's result: x's for a 4-D result of a 4-D x, else contiguous.
MemoryFormat result_format(const Tensor& x, const Shape& shape) {
  return x.ndim() == 4 && shape.size() == 4 ? x.format() : MemoryFormat::contiguous;
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined(x, "reshape", "x");
  const bool viewable =
      x.format() == MemoryFormat::contiguous || (x.ndim() == 4 && x.size(2) == 1 && x.size(3) == 1);
  // Cost: nothing for a view; a relayout copy otherwise (counted by Tensor::copy_'s own scope).
  RT_PROFILE_OP("reshape", prof::OpCost{}, &x);
  Tensor y = viewable ? x.view(shape) : x.contiguous().view(shape);
  record("reshape", y, {x}, [in = x.shape()](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g.contiguous().view(in)};
  });
  return y;
}

Tensor view(const Tensor& x, const Shape& shape) {
  check_defined(x, "view", "x");
  RT_PROFILE_OP("view", prof::OpCost{}, &x);  // Cost: none, the storage is shared
  Tensor y = x.view(shape);                    // throws when the layout does not allow a view
  record("view", y, {x}, [in = x.shape()](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g.contiguous().view(in)};
  });
  return y;
}

Tensor flatten(const Tensor& x, int start_dim) {
  check_defined(x, "flatten", "x");
  const int n = x.ndim();
  const int s = start_dim < 0 ? start_dim + n : start_dim;
  RT_CHECK(s >= 0 && s < std::max(n, 1), "flatten: start_dim ", start_dim, " out of range for ", x.str());
  RT_PROFILE_OP("flatten", prof::OpCost{}, &x);  // Cost: reshape's
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

Tensor contiguous(const Tensor& x) {
  check_defined(x, "contiguous", "x");
  if (x.format() == MemoryFormat::contiguous) return x;
  // Cost: to_format's.
  RT_PROFILE_OP("contiguous", prof::OpCost{}, &x);
  return to_format(x, MemoryFormat::contiguous);
}

Tensor permute(const Tensor& x, const std::vector<int>& order) {
  const char* op = "permute";
  check_defined(x, op, "x");
  const int n = x.ndim();
  RT_CHECK(int(order.size()) == n, op, ": order has ", order.size(), " dims for ", x.str());
  std::vector<int> perm(static_cast<size_t>(n)), inverse(static_cast<size_t>(n), -1);
  for (int k = 0; k < n; ++k) {
    const int d = ops::wrap_dim(order[size_t(k)], n, op);
    RT_CHECK(inverse[size_t(d)] < 0, op, ": dim ", d, " appears more than once in the order");
    perm[size_t(k)] = d;
    inverse[size_t(d)] = k;
  }
  RT_PROFILE_OP(op, copy_cost(x.numel(), x.dtype()), &x);
  bool identity = true;
  for (int k = 0; k < n; ++k) identity = identity && perm[size_t(k)] == k;
  if (identity && x.format() == MemoryFormat::contiguous) return x;
  Shape shape(static_cast<size_t>(n));
  std::vector<int64_t> src(static_cast<size_t>(n));
  const std::vector<int64_t> xs = ops::strides(x);
  for (int k = 0; k < n; ++k) {
    shape[size_t(k)] = x.size(perm[size_t(k)]);
    src[size_t(k)] = xs[size_t(perm[size_t(k)])];
  }
  Tensor y = ops::gather_copy(x, shape, 0, src, MemoryFormat::contiguous);
  record(op, y, {x}, [in = x.shape(), fmt = x.format(), inverse](const Tensor& g, const std::vector<bool>&) {
    // dx[d] = g[inverse[d]]: the inverse permutation, read straight into x's layout.
    const std::vector<int64_t> gs = ops::strides(g);
    std::vector<int64_t> src(in.size());
    for (size_t d = 0; d < in.size(); ++d) src[d] = gs[size_t(inverse[d])];
    return std::vector<Tensor>{ops::gather_copy(g, in, 0, src, fmt)};
  });
  return y;
}

Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  const char* op = "narrow";
  check_defined(x, op, "x");
  const int d = ops::wrap_dim(dim, x.ndim(), op);
  RT_CHECK(start >= 0 && length >= 0 && start <= x.size(d) && length <= x.size(d) - start, op, ": [", start, ", ",
           start + length, ") is not within dim ", d, " of ", x.str());
  Shape shape = x.shape();
  shape[size_t(d)] = length;
  RT_PROFILE_OP(op, copy_cost(shape_numel(shape), x.dtype()), &x);
  const std::vector<int64_t> xs = ops::strides(x);
  Tensor y = ops::gather_copy(x, shape, start * xs[size_t(d)], xs, result_format(x, shape));
  record(op, y, {x}, [in = x.shape(), fmt = x.format(), d, start](const Tensor& g, const std::vector<bool>&) {
    // dx: zeros with g written into the slice.
    Tensor dx = Tensor::zeros(in, g.dtype(), g.device(), fmt);
    const std::vector<int64_t> ds = ops::strides(dx);
    ops::strided_copy(g.shape(), g, 0, ops::strides(g), dx, start * ds[size_t(d)], ds);
    return std::vector<Tensor>{dx};
  });
  return y;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim) {
  const char* op = "split";
  check_defined(x, op, "x");
  const int d = ops::wrap_dim(dim, x.ndim(), op);
  int64_t total = 0;
  for (int64_t s : sizes) {
    RT_CHECK(s >= 0, op, ": negative size ", s, " in sizes");
    total += s;
  }
  RT_CHECK(total == x.size(d), op, ": sizes add up to ", total, " but dim ", d, " of ", x.str(), " has ", x.size(d));
  RT_PROFILE_OP(op, prof::OpCost{}, &x);  // Cost: the narrows'
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, d, start, s));
    start += s;
  }
  return out;
}

Tensor concat(const std::vector<Tensor>& tensors, int dim) {
  const char* op = "concat";
  RT_CHECK(!tensors.empty(), op, ": no tensors to concatenate");
  for (const Tensor& t : tensors) check_defined(t, op, "tensors");
  const Tensor& t0 = tensors[0];
  const int n = t0.ndim();
  const int d = ops::wrap_dim(dim, n, op);
  Shape shape = t0.shape();
  shape[size_t(d)] = 0;
  bool all_channels_last = n == 4;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_same_dtype(t0, t, op);
    check_same_device(t0, t, op);
    RT_CHECK(t.ndim() == n, op, ": tensor ", i, " is ", t.str(), ", tensor 0 ", t0.str(), " (ranks differ)");
    for (int k = 0; k < n; ++k)
      RT_CHECK(k == d || t.size(k) == t0.size(k), op, ": tensor ", i, " is ", t.str(), ", tensor 0 ", t0.str(),
               "; only dim ", d, " may differ");
    shape[size_t(d)] += t.size(d);
    all_channels_last = all_channels_last && t.format() == MemoryFormat::channels_last;
  }
  RT_PROFILE_OP(op, copy_cost(shape_numel(shape), t0.dtype()), &t0);
  // The result is channels_last when every input is (PyTorch keeps a format all inputs share).
  Tensor y = Tensor::empty(shape, t0.dtype(), t0.device(),
                           all_channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous);
  const std::vector<int64_t> ys = ops::strides(y);
  std::vector<int64_t> starts;
  std::vector<Shape> shapes;
  std::vector<MemoryFormat> formats;
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    ops::strided_copy(t.shape(), t, 0, ops::strides(t), y, start * ys[size_t(d)], ys);
    starts.push_back(start);
    shapes.push_back(t.shape());
    formats.push_back(t.format());
    start += t.size(d);
  }
  record(op, y, tensors, [d, starts, shapes, formats](const Tensor& g, const std::vector<bool>& needs) {
    // Each input's gradient is its slice of g, read into that input's layout.
    const std::vector<int64_t> gs = ops::strides(g);
    std::vector<Tensor> dx(needs.size());
    for (size_t i = 0; i < needs.size(); ++i)
      if (needs[i]) dx[i] = ops::gather_copy(g, shapes[i], starts[i] * gs[size_t(d)], gs, formats[i]);
    return dx;
  });
  return y;
}

}  // namespace rt
