#include "engine/nn/compute_copies.h"

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/profiler.h"

namespace rt::nn {

Tensor cast(const Tensor& x, DType dtype) {
  check_defined(x, "cast", "input");
  RT_CHECK(is_floating(x.dtype()) && is_floating(dtype), "cast: converts between floating dtypes, got ", x.str(),
           " to ", dtype_name(dtype));
  if (x.dtype() == dtype) return x;
  // Cost: x read, y written; back the same in reverse.
  RT_PROFILE_OP("cast", (prof::OpCost{{0, double(x.numel()) * double(dtype_size(x.dtype()) + dtype_size(dtype))},
                                      {0, double(x.numel()) * double(dtype_size(x.dtype()) + dtype_size(dtype))}}),
                &x);
  Tensor y = x.to(dtype);
  record("cast", y, {x}, [from = x.dtype()](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g.to(from)};
  });
  return y;
}

ComputeCopies::ComputeCopies(Module& model, DType dtype) : model_(model), dtype_(dtype) {
  RT_CHECK(is_floating(dtype), "ComputeCopies: the compute dtype must be floating, got ", dtype_name(dtype));
  std::map<const TensorImpl*, Tensor> bind;
  for (const auto& [name, p] : model.compute_parameters()) {
    RT_CHECK(is_floating(p.dtype()) && p.dtype() != dtype, "ComputeCopies: parameter '", name, "' is ", p.str(),
             "; the masters must be floating and in another dtype than the compute dtype ", dtype_name(dtype));
    Tensor c = Tensor::empty(p.shape(), dtype, p.device(), p.format());
    c.set_requires_grad(true);
    masters_.emplace_back(name, p);
    copies_.emplace_back(name, c);
    bind[p.impl_ptr().get()] = c;
  }
  model_.bind_compute_copies(bind);
}

ComputeCopies::~ComputeCopies() { model_.bind_compute_copies({}); }

void ComputeCopies::refresh() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < masters_.size(); ++i) {
    Tensor& c = copies_[i].second;
    c.zero_grad();
    c.copy_(masters_[i].second);
  }
}

void ComputeCopies::accumulate_grads() {
  for (size_t i = 0; i < masters_.size(); ++i) accumulate_grad(i);
}

void ComputeCopies::accumulate_grad(size_t i) {
  NoGradGuard no_grad;
  const Tensor& m = masters_[i].second;
  Tensor& c = copies_[i].second;
  const Tensor g = c.grad();
  if (!g.defined()) return;
  Tensor wide = g.to(m.dtype());  // a new tensor: the dtypes differ
  if (m.grad().defined()) add_(m.grad(), wide);
  else Tensor(m).set_grad(wide);
  c.zero_grad();
}

}  // namespace rt::nn
