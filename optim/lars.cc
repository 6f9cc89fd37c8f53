// LARS with the rule of MLPerf's ResNet50 reference (TensorFlow's LARSOptimizer): a
// per-parameter trust ratio scales the lr, and the velocity holds the scaled lr
// (Note [LARS keeps the lr inside the velocity] in optimizer.h).
#include <cmath>

#include "engine/autograd.h"
#include "engine/stream.h"
#include "kernels/cuda/grad_norm.h"
#include "kernels/cuda/optim.h"
#include "optim/momentum_optimizer.h"
#include "optim/optimizer.h"
#include "optim/param_util.h"
#include "optim/update_cpu.h"

namespace rt::optim {
namespace {

constexpr const char* kWho = "LARS";

void check_options(const LarsOptions& o) {
  check_non_negative(o.lr, "lr", kWho);
  check_non_negative(o.momentum, "momentum", kWho);
  check_non_negative(o.weight_decay, "weight_decay", kWho);
  check_non_negative(o.eta, "eta", kWho);
  check_non_negative(o.epsilon, "epsilon", kWho);
}

class Lars final : public MomentumOptimizer {
 public:
  Lars(nn::NamedTensors params, const LarsOptions& opt)
      : MomentumOptimizer(std::move(params), opt.lr, kWho), opt_(opt) {}

  void step() override {
    Device cuda_device = Device::cpu();
    // Norms: p and g read, 2 flops each; update: p, g, v read, p and v written, ~6 flops.
    run_step<cuda::LarsTensor>(
        "lars_step", params_, lr_, kWho, 10, 7,
        [&](size_t i, const Tensor& p, const Tensor& g, CudaUpdates<cuda::LarsTensor>& on_cuda) {
          const bool excluded = opt_.exclude_bn_bias && p.ndim() <= 1;
          const double wd = excluded ? 0.0 : decay_of(params_, i, opt_.weight_decay, false, opt_.weight_decay_of);
          // The velocity starts at zero: the update reads it from the first step on.
          make_buffer(i, p, /*zeros=*/true);
          const Tensor& v = buffers_[i];
          const int64_t n = p.numel();
          if (p.device().is_cuda()) {
            cuda::LarsTensor e;
            e.p = p.raw_data();
            e.g = g.raw_data();
            e.v = v.raw_data();
            e.n = n;
            e.weight_decay = wd;
            e.adapt = !excluded;
            on_cuda.add(p, e);
            cuda_device = p.device();
            return;
          }
          cpu::LarsScalars s;
          s.momentum = opt_.momentum;
          s.weight_decay = wd;
          s.nesterov = opt_.nesterov;
          s.scaled_lr = lr_;
          if (p.dtype() == DType::f32) {
            if (!excluded) s.scaled_lr *= trust_ratio(p.data<float>(), g.data<float>(), n, wd);
            cpu::lars_update<float>(p.data<float>(), g.data<float>(), v.data<float>(), n, s);
          } else {
            if (!excluded) s.scaled_lr *= trust_ratio(p.data<double>(), g.data<double>(), n, wd);
            cpu::lars_update<double>(p.data<double>(), g.data<double>(), v.data<double>(), n, s);
          }
        },
        [&](DType t, const std::vector<cuda::LarsTensor>& list, cudaStream_t stream) {
          if (list.empty()) return;
          cuda::LarsHyper h;
          h.lr = lr_;
          h.lr_on_device = device_lr_ptr();
          h.skip_if_set = skip_flag_ptr();
          h.momentum = opt_.momentum;
          h.eta = opt_.eta;
          h.epsilon = opt_.epsilon;
          h.nesterov = opt_.nesterov;
          // [chunks of the norms' list] partial sums of squares; from the caching allocator on
          // this stream, so freeing it after the launches is safe (Note [Streams and blocks]).
          Tensor partials = Tensor::empty({cuda::lars_partials(list)}, t, cuda_device);
          cuda::lars_update(t, list, h, tables_[t == DType::f32 ? 0 : 1], partials.raw_data(), stream);
        });
  }

 private:
  template <typename T>
  double trust_ratio(const T* p, const T* g, int64_t n, double wd) const {
    const double w_norm = std::sqrt(cpu::sum_squares(p, n)), g_norm = std::sqrt(cpu::sum_squares(g, n));
    return cpu::lars_trust_ratio(w_norm, g_norm, opt_.eta, wd, opt_.epsilon);
  }

  LarsOptions opt_;
  cuda::LarsTables tables_[2];  // the f32 and f64 lists on the device
};

}  // namespace

std::unique_ptr<Optimizer> make_lars(nn::NamedTensors params, const LarsOptions& opt) {
  check_options(opt);
  return make_checked<Lars>(std::move(params), opt, kWho);
}

}  // namespace rt::optim
