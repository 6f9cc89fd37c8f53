// torch.optim.SGD (1.13): weight decay added to the gradient, optional (Nesterov)
// momentum whose buffer starts as the first step's gradient.
#include <cmath>

#include "engine/autograd.h"
#include "engine/stream.h"
#include "optim/momentum_optimizer.h"
#include "optim/optimizer.h"
#include "optim/param_util.h"
#include "optim/update_cpu.h"
#include "kernels/cuda/optim.h"

namespace rt::optim {
namespace {

constexpr const char* kWho = "SGD";

void check_options(const SgdOptions& o) {
  check_non_negative(o.lr, "lr", kWho);
  check_non_negative(o.momentum, "momentum", kWho);
  check_non_negative(o.weight_decay, "weight_decay", kWho);
  RT_CHECK(std::isfinite(o.dampening), kWho, ": dampening must be finite, got ", o.dampening);
  RT_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), kWho,
           ": nesterov needs momentum > 0 and dampening == 0, got momentum ", o.momentum, " and dampening ",
           o.dampening);
}

class Sgd final : public MomentumOptimizer {
 public:
  Sgd(nn::NamedTensors params, const SgdOptions& opt)
      : MomentumOptimizer(std::move(params), opt.lr, kWho,
                          opt.momentum != 0.0 ? nullptr : "is a momentum buffer, but this optimizer has momentum 0"),
        opt_(opt) {}

  void step() override {
    // p, g, momentum read; p, momentum written; ~5 flops (decay, momentum, step).
    run_step<cuda::SgdTensor>(
        "sgd_step", params_, lr_, kWho, 5, 5,
        [&](size_t i, const Tensor& p, const Tensor& g, CudaUpdates<cuda::SgdTensor>& on_cuda) {
          cpu::SgdScalars s;
          s.lr = lr_;
          s.momentum = opt_.momentum;
          s.dampening = opt_.dampening;
          s.weight_decay = decay_of(params_, i, opt_.weight_decay, opt_.no_decay_1d, opt_.weight_decay_of);
          s.nesterov = opt_.nesterov;
          // The first momentum step writes the buffer whole (it starts as the gradient).
          const bool first = opt_.momentum != 0.0 && make_buffer(i, p, /*zeros=*/false);
          const Tensor& buf = buffers_[i];
          const int64_t n = p.numel();
          if (p.device().is_cuda()) {
            cuda::SgdTensor e;
            e.p = p.raw_data();
            e.g = g.raw_data();
            e.buf = buf.defined() ? buf.raw_data() : nullptr;
            e.n = n;
            e.weight_decay = s.weight_decay;
            e.first_step = first;
            on_cuda.add(p, e);
          } else if (p.dtype() == DType::f32) {
            cpu::sgd_update<float>(p.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr,
                                   first, n, s);
          } else {
            cpu::sgd_update<double>(p.data<double>(), g.data<double>(), buf.defined() ? buf.data<double>() : nullptr,
                                    first, n, s);
          }
        },
        [&](DType t, const std::vector<cuda::SgdTensor>& list, cudaStream_t stream) {
          cuda::SgdHyper h;
          h.lr = lr_;
          h.lr_on_device = device_lr_ptr();
          h.skip_if_set = skip_flag_ptr();
          h.momentum = opt_.momentum;
          h.dampening = opt_.dampening;
          h.nesterov = opt_.nesterov;
          cuda::sgd_update(t, list, h, tables_[t == DType::f32 ? 0 : 1], stream);
        });
  }

 private:
  SgdOptions opt_;
  cuda::MultiTensorTable tables_[2];  // the f32 and f64 lists on the device
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(nn::NamedTensors params, const SgdOptions& opt) {
  check_options(opt);
  return make_checked<Sgd>(std::move(params), opt, kWho);
}

}  // namespace rt::optim
