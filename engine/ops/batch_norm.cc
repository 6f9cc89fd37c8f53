// batch_norm: PyTorch's semantics. Training normalises with the batch's biased variance
// and updates the running variance with the unbiased one (n / (n - 1)); eval uses the
// running statistics. Kernel: kernels/cpu/batch_norm.cc.
#include "kernels/cpu/batch_norm.h"
#include "kernels/cuda/batch_norm.cuh"

#include <cmath>
#include <memory>

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {
namespace {

// r = (1 - momentum) * r + momentum * v, in r's own dtype.
void blend_running(Tensor& r, const std::vector<double>& v, double momentum) {
  ops::dispatch_float(r.dtype(), "batch_norm running stats", [&](auto z) {
    using T = decltype(z);
    T* p = r.data<T>();
    for (size_t c = 0; c < v.size(); ++c) p[c] = T((1.0 - momentum) * double(p[c]) + momentum * v[c]);
  });
}

// The CUDA path: mean and invstd stay on the device (statistics dtype: f64 for f64 input,
// f32 otherwise) and are never read on the host; the running statistics are updated there.
Tensor batch_norm_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                       Tensor running_var, bool training, double momentum, double eps, const cuda::BatchNormGeom& g) {
  const char* op = "batch_norm";
  const DType st = cuda::batch_norm_stat_dtype(x.dtype());
  const cudaStream_t s = ops::stream_of(x);
  if (running_mean.defined())
    RT_CHECK(running_mean.dtype() == running_var.dtype(), op, ": running_mean and running_var dtypes differ: ",
             running_mean.str(), " and ", running_var.str());
  Tensor mean = Tensor::empty({g.C}, st, x.device());    // (C,)
  Tensor invstd = Tensor::empty({g.C}, st, x.device());  // (C,)
  if (training) {
    RT_CHECK(g.N * g.S > 1, op, ": training needs more than one value per channel, got input ", x.str(),
             " (use a batch size above 1, or eval mode)");
    const bool run = running_mean.defined();
    cuda::batch_norm_stats(g, x.dtype(), x.raw_data(), eps, mean.raw_data(), invstd.raw_data(),
                           run ? running_mean.dtype() : st, run ? running_mean.raw_data() : nullptr,
                           run ? running_var.raw_data() : nullptr, momentum, s);
  } else {
    RT_CHECK(running_mean.defined(), op, ": eval mode needs running_mean and running_var");
    cuda::batch_norm_eval_stats(g.C, running_mean.dtype(), running_mean.raw_data(), running_var.raw_data(), eps, st,
                                mean.raw_data(), invstd.raw_data(), s);
  }
  Tensor y = ops::empty_like(x);
  cuda::batch_norm_apply(g, x.dtype(), x.raw_data(), mean.raw_data(), invstd.raw_data(),
                         weight.defined() ? weight.raw_data() : nullptr, bias.defined() ? bias.raw_data() : nullptr,
                         y.raw_data(), s);
  record(op, y, {x, weight, bias},
         [g, training, mean, invstd, x = x.detach(), w = weight.defined() ? weight.detach() : Tensor()](
             const Tensor& gy, const std::vector<bool>& needs) {
           const Tensor dy = ops::in_format(gy, x.format());
           Tensor dx = needs[0] ? ops::empty_like(x) : Tensor();
           Tensor dw = needs[1] ? ops::empty_like(w) : Tensor();
           Tensor db = needs[2] ? Tensor::empty({g.C}, x.dtype(), x.device()) : Tensor();
           Tensor coef = Tensor::empty({3 * g.C}, mean.dtype(), x.device());  // k, a, b per channel
           cuda::batch_norm_backward(g, x.dtype(), x.raw_data(), dy.raw_data(), mean.raw_data(), invstd.raw_data(),
                                     w.defined() ? w.raw_data() : nullptr, training,
                                     dx.defined() ? dx.raw_data() : nullptr, dw.defined() ? dw.raw_data() : nullptr,
                                     db.defined() ? db.raw_data() : nullptr, coef.raw_data(), ops::stream_of(x));
           return std::vector<Tensor>{dx, dw, db};
         });
  return y;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean, Tensor running_var,
                  bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  // The CPU computes in f32/f64; CUDA also takes bf16/f16 storage (computing in f32).
  const bool on_cuda = x.defined() && x.device().is_cuda();
  auto check_floating = [&](const Tensor& t, const char* name) {
    if (!on_cuda) return check_float(t, op, name);
    check_defined(t, op, name);
    RT_CHECK(is_floating(t.dtype()), op, ": argument '", name, "' must be f32, f64, bf16 or f16, got ", t.str());
  };
  check_floating(x, "input");
  RT_CHECK(x.ndim() >= 2, op, ": input must be (N, C, ...), got ", x.str());
  const int64_t N = x.size(0), C = x.size(1);
  const int64_t S = x.numel() / std::max<int64_t>(N * C, 1);
  auto check_param = [&](const Tensor& t, const char* name, bool same_dtype) {
    if (!t.defined()) return;
    RT_CHECK(t.shape() == Shape{C}, op, ": ", name, " must be [", C, "] for an input with ", C, " channels, got ", t.str());
    check_same_device(x, t, op);
    if (same_dtype) check_same_dtype(x, t, op);
    else check_floating(t, name);
  };
  check_param(weight, "weight", true);
  check_param(bias, "bias", true);
  check_param(running_mean, "running_mean", false);
  check_param(running_var, "running_var", false);
  RT_CHECK(running_mean.defined() == running_var.defined(), op, ": running_mean and running_var go together");
  RT_CHECK(eps > 0, op, ": eps must be positive, got ", eps);

  const bool nhwc = x.ndim() == 2 || x.format() == MemoryFormat::channels_last;
  if (on_cuda)
    return batch_norm_cuda(x, weight, bias, running_mean, running_var, training, momentum, eps,
                           cuda::BatchNormGeom{N, C, S, nhwc});
  const cpu::BatchNormGeom g{N, C, S, nhwc};
  auto mean = std::make_shared<std::vector<double>>(size_t(C));
  auto invstd = std::make_shared<std::vector<double>>(size_t(C));
  if (training) {
    RT_CHECK(N * S > 1, op, ": training needs more than one value per channel, got input ", x.str(),
             " (use a batch size above 1, or eval mode)");
    std::vector<double> var(static_cast<size_t>(C));
    ops::dispatch_float(x.dtype(), op, [&](auto z) {
      using T = decltype(z);
      cpu::batch_norm_stats<T>(g, x.data<T>(), mean->data(), var.data());
    });
    for (int64_t c = 0; c < C; ++c) (*invstd)[c] = 1.0 / std::sqrt(var[c] + eps);
    if (running_mean.defined()) {
      const double unbias = double(N * S) / double(N * S - 1);
      for (double& v : var) v *= unbias;
      blend_running(running_mean, *mean, momentum);
      blend_running(running_var, var, momentum);
    }
  } else {
    RT_CHECK(running_mean.defined(), op, ": eval mode needs running_mean and running_var");
    *mean = running_mean.to_vector<double>();
    std::vector<double> var = running_var.to_vector<double>();
    for (int64_t c = 0; c < C; ++c) (*invstd)[c] = 1.0 / std::sqrt(var[c] + eps);
  }

  Tensor y = ops::empty_like(x);
  ops::dispatch_float(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    cpu::batch_norm_apply<T>(g, x.data<T>(), mean->data(), invstd->data(), weight.defined() ? weight.data<T>() : nullptr,
                             bias.defined() ? bias.data<T>() : nullptr, y.data<T>());
  });

  record(op, y, {x, weight, bias},
         [g, training, mean, invstd, x = x.detach(), w = weight.defined() ? weight.detach() : Tensor()](
             const Tensor& gy, const std::vector<bool>& needs) {
           const Tensor dy = ops::in_format(gy, x.format());
           Tensor dx = needs[0] ? ops::empty_like(x) : Tensor();
           Tensor dw = needs[1] ? ops::empty_like(w) : Tensor();
           Tensor db = needs[2] ? Tensor::empty({g.C}, x.dtype(), x.device()) : Tensor();
           ops::dispatch_float(x.dtype(), "batch_norm backward", [&](auto z) {
             using T = decltype(z);
             cpu::batch_norm_backward<T>(g, x.data<T>(), dy.data<T>(), mean->data(), invstd->data(),
                                         w.defined() ? w.data<T>() : nullptr, training,
                                         dx.defined() ? dx.data<T>() : nullptr, dw.defined() ? dw.data<T>() : nullptr,
                                         db.defined() ? db.data<T>() : nullptr);
           });
           return std::vector<Tensor>{dx, dw, db};
         });
  return y;
}

}  // namespace rt
