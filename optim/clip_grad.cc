#include "optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/profiler.h"
#include "engine/stream.h"
#include "kernels/cuda/grad_norm.h"
#include "optim/param_util.h"
#include "optim/update_cpu.h"

namespace rt::optim {
namespace {

constexpr const char* kWho = "clip_grad_norm";

}  // namespace

Tensor clip_grad_norm(const nn::NamedTensors& params, double max_norm, cuda::MultiTensorTable* table) {
  check_non_negative(max_norm, "max_norm", kWho);
  NoGradGuard no_grad;
  // The gradients, all of one dtype (f32 or f64) and device.
  std::vector<Tensor> grads;
  std::string first_name;
  for (const auto& [name, p] : params) {
    RT_CHECK(p.defined(), kWho, ": parameter '", name, "' is an undefined tensor");
    Tensor g = p.grad();
    if (!g.defined()) continue;
    RT_CHECK(g.dtype() == DType::f32 || g.dtype() == DType::f64, kWho, ": the gradient of '", name, "' is ",
             dtype_name(g.dtype()), "; expected f32 or f64");
    if (grads.empty()) {
      first_name = name;
    } else {
      const Tensor& g0 = grads.front();
      RT_CHECK(g.dtype() == g0.dtype(), kWho, ": the gradient of '", name, "' is ", dtype_name(g.dtype()),
               " but that of '", first_name, "' is ", dtype_name(g0.dtype()),
               "; mixed f32/f64 gradients are not supported (clip each dtype's list separately)");
      RT_CHECK(g.device() == g0.device(), kWho, ": the gradient of '", name, "' is on ", g.device().str(),
               " but that of '", first_name, "' is on ", g0.device().str());
    }
    grads.push_back(std::move(g));
  }
  if (grads.empty()) {
    if (params.empty()) return Tensor::scalar(0.0);
    const Tensor& p0 = params.front().second;
    return Tensor::scalar(0.0, p0.dtype(), p0.device());
  }

  const DType t = grads.front().dtype();
  const Device dev = grads.front().device();
  prof::OpScope scope("clip_grad_norm");
  if (scope.active()) {
    double bytes = 0;
    for (const Tensor& g : grads) bytes += double(g.nbytes());
    const double n = bytes / double(dtype_size(t));
    scope.describe({}, prof::OpCost{{3 * n, 3 * bytes}, {}});  // read twice, written once; square-add, scale
  }

  if (dev.is_cuda()) {
    std::vector<const void*> in;
    std::vector<int64_t> n;
    for (const Tensor& g : grads) {
      in.push_back(g.raw_data());
      n.push_back(g.numel());
    }
    cuda::MultiTensorTable local;
    cuda::MultiTensorTable& list = table != nullptr ? *table : local;
    const auto stream = static_cast<cudaStream_t>(Stream::current(dev).handle());
    // From the caching allocator on this stream: freed after the launches, reused only by
    // later work on it (Note [Streams and blocks]).
    Tensor partials = Tensor::empty({cuda::multi_tensor_chunks(n)}, t, dev);  // [chunks]
    Tensor coef = Tensor::empty({}, DType::f64, dev);                         // []
    Tensor total = Tensor::empty({}, t, dev);                                 // []
    cuda::sum_squares_partials(t, in, n, list, partials.raw_data(), stream);
    cuda::clip_grad_coef(t, list, partials.raw_data(), max_norm, total.raw_data(), coef.data<double>(), stream);
    cuda::scale_by_device_coef(t, list, coef.data<double>(), stream);
    return total;
  }

  // torch: total_norm = norm(stack([norm(g) for g in grads])).
  double sq = 0.0;
  for (const Tensor& g : grads) {
    const double norm = std::sqrt(t == DType::f32 ? cpu::sum_squares(g.data<float>(), g.numel())
                                                  : cpu::sum_squares(g.data<double>(), g.numel()));
    sq += norm * norm;
  }
  const double total = std::sqrt(sq);
  const double coef = std::min(max_norm / (total + 1e-6), 1.0);
  for (const Tensor& g : grads) {
    if (t == DType::f32) cpu::scale(g.data<float>(), g.numel(), coef);
    else cpu::scale(g.data<double>(), g.numel(), coef);
  }
  return Tensor::scalar(total, t);
}

}  // namespace rt::optim
