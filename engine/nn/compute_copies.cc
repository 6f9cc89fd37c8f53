#include "engine/nn/compute_copies.h"

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "engine/stream.h"
#include "kernels/cuda/cast.h"

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

bool ComputeCopies::cast_many_ok(size_t i) const {
  const Tensor& m = masters_[i].second;
  const Tensor& c = copies_[i].second;
  const Tensor& m0 = masters_[0].second;
  return m.device().is_cuda() && c.device() == m.device() && m.device() == m0.device() && m.dtype() == m0.dtype() &&
         c.format() == m.format();
}

void ComputeCopies::refresh() {
  NoGradGuard no_grad;
  std::vector<cuda::CastTensor> many;
  for (size_t i = 0; i < masters_.size(); ++i) {
    Tensor& c = copies_[i].second;
    c.zero_grad();
    if (cast_many_ok(i)) many.push_back({masters_[i].second.raw_data(), c.raw_data(), c.numel(), false});
    else c.copy_(masters_[i].second);
  }
  if (many.empty()) return;
  const Tensor& m0 = masters_[0].second;
  prof::OpScope scope("convert");
  if (scope.active()) {
    double bytes = 0;
    for (const auto& e : many) bytes += double(e.n) * double(dtype_size(m0.dtype()) + dtype_size(dtype_));
    scope.describe({}, {{0, bytes}, {}});
  }
  const auto stream = static_cast<cudaStream_t>(Stream::current(m0.device()).handle());
  cuda::cast_many(m0.dtype(), dtype_, many, refresh_table_, stream);
}

void ComputeCopies::accumulate_grads() {
  NoGradGuard no_grad;
  std::vector<cuda::CastTensor> many;
  std::vector<size_t> done;  // their copies' gradients are dropped after the launch reads them
  double bytes = 0;
  for (size_t i = 0; i < masters_.size(); ++i) {
    const Tensor g = copies_[i].second.grad();
    if (!g.defined()) continue;
    if (!cast_many_ok(i) || g.format() != masters_[i].second.format()) {
      accumulate_grad(i);
      continue;
    }
    Tensor m = masters_[i].second;
    Tensor dst = m.grad();
    const bool acc = dst.defined();
    if (!acc) {  // the master's gradient buffer (Note [Gradient buffers]) or a new tensor, written whole
      dst = m.grad_buffer().defined() ? m.grad_buffer() : Tensor::empty(m.shape(), m.dtype(), m.device(), m.format());
      m.set_grad(dst);
    }
    many.push_back({g.raw_data(), dst.raw_data(), g.numel(), acc});
    done.push_back(i);
    bytes += double(g.numel()) * double(dtype_size(g.dtype()) + (acc ? 2 : 1) * dtype_size(m.dtype()));
  }
  if (many.empty()) return;
  const Tensor& m0 = masters_[0].second;
  {
    prof::OpScope scope("convert");
    if (scope.active()) scope.describe({}, {{0, bytes}, {}});
    cuda::cast_many(dtype_, m0.dtype(), many, accumulate_table_,
                    static_cast<cudaStream_t>(Stream::current(m0.device()).handle()));
  }
  // Freed to the caching allocator after the launch: reused only by later work on this
  // stream (Note [Streams and blocks]).
  for (size_t i : done) copies_[i].second.zero_grad();
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
