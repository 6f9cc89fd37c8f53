#include "engine/gradcheck.h"

#include <cmath>
#include <sstream>

#include "engine/autograd.h"
#include "engine/random.h"

namespace rt {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    RT_CHECK(t.dtype() == DType::f64 && t.is_leaf(), "gradcheck: inputs must be f64 leaf tensors, got ", t.str(),
             " (make one with .to(DType::f64), then set_requires_grad)");
  }
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) t.zero_grad();

  Tensor y = f(inputs);
  RT_CHECK(y.requires_grad(), "gradcheck: the output does not require grad; mark an input with set_requires_grad");
  Generator g(opt.seed);
  Tensor r = randn(y.shape(), g, DType::f64, Device::cpu(), y.format());
  const std::vector<double> rv = r.to_vector<double>();
  y.backward(r.to(y.device()));

  // L(x) = sum(r * f(x)), in logical order, without recording.
  auto loss = [&]() {
    NoGradGuard ng;
    const std::vector<double> v = f(inputs).to_vector<double>();
    double s = 0;
    for (size_t i = 0; i < v.size(); ++i) s += v[i] * rv[i];
    return s;
  };

  GradcheckResult res;
  std::ostringstream msg;
  int reported = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor ga = x.grad();
    const std::vector<double> analytic = ga.defined() ? ga.to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    // Perturb in memory order; map memory index -> logical index for the comparison. A CUDA
    // input is perturbed in a host copy, copied back before each evaluation.
    const std::vector<int64_t> st = strides_of(x.shape(), x.format());
    Tensor host = x.device().is_cpu() ? x : x.detach().to(Device::cpu());
    double* p = host.data<double>();
    Tensor device_x = x;  // a handle: its copy_ writes x's storage
    const auto sync = [&] {
      if (!host.same(device_x)) device_x.copy_(host);
    };
    for (int64_t li = 0; li < x.numel(); ++li) {
      int64_t rem = li, mi = 0;
      for (int d = x.ndim() - 1; d >= 0; --d) {
        mi += (rem % x.shape()[d]) * st[d];
        rem /= x.shape()[d];
      }
      const double orig = p[mi];
      p[mi] = orig + opt.eps;
      sync();
      const double lp = loss();
      p[mi] = orig - opt.eps;
      sync();
      const double lm = loss();
      p[mi] = orig;
      sync();
      const double numeric = (lp - lm) / (2 * opt.eps);
      const double err = std::abs(analytic[li] - numeric);
      res.max_abs_err = std::max(res.max_abs_err, err);
      if (err > opt.atol + opt.rtol * std::abs(numeric)) {
        res.ok = false;
        if (reported++ < 10)
          msg << "input " << k << " " << x.str() << " element " << li << ": analytic " << analytic[li]
              << ", numeric " << numeric << "\n";
      }
    }
  }
  res.message = msg.str();
  return res;
}

std::vector<Tensor> gradcheck_leaves(const std::vector<Shape>& shapes, uint64_t seed, GradcheckValues values,
                                     const std::vector<MemoryFormat>& formats) {
  Generator g(seed);
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor v = randn(shapes[i], g, DType::f64, Device::cpu());
    if (values == GradcheckValues::positive) {
      double* p = v.data<double>();
      for (int64_t j = 0; j < v.numel(); ++j) p[j] = std::abs(p[j]) + 0.25;
    }
    if (i < formats.size() && v.ndim() == 4) v = v.to(formats[i]);
    v.set_requires_grad(true);
    leaves.push_back(v);
  }
  return leaves;
}

GradcheckResult gradcheck_shapes(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                 const std::vector<Shape>& shapes, uint64_t seed, GradcheckValues values,
                                 const std::vector<MemoryFormat>& formats, const GradcheckOptions& opt) {
  const std::vector<Tensor> leaves = gradcheck_leaves(shapes, seed, values, formats);
  GradcheckResult r = gradcheck(f, leaves, opt);
  if (!r.ok) {
    std::ostringstream head;
    head << "gradcheck of";
    for (const Tensor& t : leaves) head << " " << t.str() << ";";
    head << " seed " << seed << (values == GradcheckValues::positive ? ", positive values" : "")
         << ": max abs err " << r.max_abs_err << "\n";
    r.message = head.str() + r.message;
  }
  return r;
}

}  // namespace rt
