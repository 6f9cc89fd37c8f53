// torch.optim.SGD (1.13): weight decay added to the gradient, optional (Nesterov)
// momentum whose buffer starts as the first step's gradient.
#include <cmath>

#include "engine/autograd.h"
#include "engine/stream.h"
#include "optim/optimizer.h"
#include "optim/param_util.h"
#include "optim/update_cpu.h"
#include "kernels/cuda/optim.cuh"

namespace rt::optim {
namespace {

constexpr const char* kWho = "SGD";
const std::string kMomentumBuffer = "momentum_buffer";

void check_options(const SgdOptions& o) {
  check_non_negative(o.lr, "lr", kWho);
  check_non_negative(o.momentum, "momentum", kWho);
  check_non_negative(o.weight_decay, "weight_decay", kWho);
  RT_CHECK(std::isfinite(o.dampening), kWho, ": dampening must be finite, got ", o.dampening);
  RT_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), kWho,
           ": nesterov needs momentum > 0 and dampening == 0, got momentum ", o.momentum, " and dampening ",
           o.dampening);
}

class Sgd final : public Optimizer {
 public:
  Sgd(nn::NamedTensors params, const SgdOptions& opt)
      : Optimizer(std::move(params), opt.lr), opt_(opt), buffers_(params_.size()) {}

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
          const bool first = opt_.momentum != 0.0 && !buffers_[i].defined();
          check_state_before_skip(params_[i].first, p, !first, kWho);
          if (first) buffers_[i] = Tensor::empty(p.shape(), p.dtype(), p.device(), p.format());
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

  bool takes_device_lr() const override { return true; }
  bool takes_skip_flag() const override { return true; }

  std::map<std::string, Tensor> state() const override { return buffers_state(kMomentumBuffer, params_, buffers_); }

  void load_state(const std::map<std::string, Tensor>& state) override {
    const char* refuse = "is a momentum buffer, but this optimizer has momentum 0";
    buffers_ = restore_buffers(state, kMomentumBuffer, params_, kWho, opt_.momentum != 0.0 ? nullptr : refuse);
  }

 private:
  SgdOptions opt_;
  std::vector<Tensor> buffers_;  // per parameter; undefined until its first momentum step
  cuda::MultiTensorTable tables_[2];  // the f32 and f64 lists on the device
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(nn::NamedTensors params, const SgdOptions& opt) {
  check_options(opt);
  check_param_list(params, kWho);
  check_decay_by_name(opt.weight_decay_of, params, kWho);
  return std::make_unique<Sgd>(std::move(params), opt);
}

}  // namespace rt::optim
