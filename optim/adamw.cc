// torch.optim.AdamW (1.13, amsgrad off): decoupled weight decay, then Adam's moments
// with bias corrections from each parameter's own step count.
#include <cmath>
#include <memory>

#include "engine/autograd.h"
#include "engine/stream.h"
#include "optim/optimizer.h"
#include "optim/param_util.h"
#include "optim/update_cpu.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/runtime.h"

namespace rt::optim {
namespace {

constexpr const char* kWho = "AdamW";
const std::string kExpAvg = "exp_avg";
const std::string kExpAvgSq = "exp_avg_sq";
const std::string kStep = "step";

void check_options(const AdamWOptions& o) {
  check_non_negative(o.lr, "lr", kWho);
  check_non_negative(o.eps, "eps", kWho);
  check_non_negative(o.weight_decay, "weight_decay", kWho);
  RT_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0, kWho, ": beta1 must be in [0, 1), got ", o.beta1);
  RT_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0, kWho, ": beta2 must be in [0, 1), got ", o.beta2);
}

// A parameter's state; created at its first step with a gradient.
struct Slot {
  Tensor exp_avg, exp_avg_sq;  // undefined until then
  int64_t step = 0;            // steps this parameter took
};

// The saved step count: a 0-D integer tensor (i64 when ringtape wrote it).
int64_t restore_step(const Tensor& t, const std::string& key) {
  RT_CHECK(t.ndim() == 0 && (t.dtype() == DType::i64 || t.dtype() == DType::i32), kWho, ": state entry '", key,
           "' must be a 0-D i64 step count, got ", t.str());
  const Tensor h = t.to(Device::cpu());
  const int64_t step = h.dtype() == DType::i64 ? *h.data<int64_t>() : *h.data<int32_t>();
  RT_CHECK(step >= 0, kWho, ": state entry '", key, "' is a negative step count (", step, ")");
  return step;
}

// Note [AdamW's scalars in device memory]
// AdamW's update takes three scalars per tensor that change every step: 1 - lr x weight
// decay, and its bias corrections' sqrt(1 - beta2^t) and -lr / (1 - beta1^t), t the
// parameter's own step count, computed on the host in double (optim/update_cpu.cc's
// rounding). A captured step (--cuda-graphs) would replay them with the counts it had at
// capture. With a device lr set (Note [The learning rate in device memory] in
// optim/optimizer.h) the kernel reads them from device memory instead
// (cuda::AdamWHyper::scalars_on_device): before every step the caller calls
// prepare_device_step(), which computes the coming step's distinct sets on the host as step()
// will (each parameter that took the last step, its count + 1, the current lr) and writes
// them with one launch (cuda::adamw_write_scalars); after a replay count_replayed_step()
// advances the host's counts as step() would have. step() computes its sets too and, outside
// a capture, writes them itself when they differ from the prepared ones (the first step, a
// parameter that has no gradient this time); inside a capture a difference is an error, as
// the graph would bake it. Same doubles, same kernels: eager, captured and CPU results stay
// bit for bit.
//
// Note [AdamW's skipped steps in a captured step]
// With fp16's loss scaler a replayed step skips its update on the device when the gradients
// overflowed (Note [Skipping an update on the device] in optim/optimizer.h), and the host,
// which counts AdamW's steps, does not know it did: after a replay it counts the step as if
// it stood. So the device counts the skipped ones (skipped_, one thread after the update:
// cuda::count_if_set), and the host's count of a parameter is s too high when skipped_ holds s.
// prepare_device_step() therefore writes kCandidates groups of scalar sets, group c for counts
// c lower, and the update reads group skipped_ when it runs (cuda::AdamWHyper::
// candidate_on_device): the scalars of the true count, computed by the host in double as
// always. The host takes the count back without waiting on the device: every few replays it
// queues a copy of skipped_ to pinned memory and an event after it (a snapshot); once the
// event has passed (a query, not a wait) it subtracts the snapshot's s from its counts and
// from skipped_ (cuda::take_count, in stream order, so the replays since the snapshot stay
// counted). The host bounds skipped_ by the replays it has not yet taken back (unsettled_),
// and only when that bound would pass the last candidate does it wait for the snapshot, one
// some steps old (the device still has the later steps queued, so it does not idle). An eager
// step() and state() settle everything first (a checkpoint holds the true counts), load_state()
// starts from zero. Replays and eager steps give the same bits: tests/cuda/grad_scaler_cuda_test.
class AdamW final : public Optimizer {
 public:
  AdamW(nn::NamedTensors params, const AdamWOptions& opt)
      : Optimizer(std::move(params), opt.lr), opt_(opt), slots_(params_.size()), stepped_(params_.size(), false) {}

  bool takes_device_lr() const override { return true; }
  bool takes_skip_flag() const override { return true; }

  void prepare_device_step() override {
    if (!device_lr_.defined()) return;
    const Stream stream = Stream::current(device_lr_.device());
    if (!skipped_.defined()) {  // here, outside any capture (a capture refuses the pinned allocation)
      skipped_ = Tensor::zeros({1}, DType::i64, device_lr_.device());
      snapshot_ = Tensor::empty_pinned({1}, DType::i64);
      snapshot_done_ = std::make_unique<Event>(device_lr_.device());
    }
    settle(stream, false);
    std::vector<cuda::AdamWTensor> lists[2];
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i].second;
      // The parameters the last step updated; before any, those that can get a gradient.
      const bool next = any_step_ ? stepped_[i] : p.requires_grad();
      if (!next || !p.device().is_cuda()) continue;
      cuda::AdamWTensor e;
      e.weight_decay = decay_of(params_, i, opt_.weight_decay, opt_.no_decay_1d, opt_.weight_decay_of);
      e.step = slots_[i].step + 1;
      lists[p.dtype() == DType::f32 ? 0 : 1].push_back(e);
    }
    const auto s = static_cast<cudaStream_t>(stream.handle());
    for (int k = 0; k < 2; ++k) {
      const std::vector<double> all = cuda::adamw_scalar_sets(lists[k], hyper(), candidates());
      // The first candidate: the sets of the counts the host holds.
      write_sets(k, std::vector<double>(all.begin(), all.begin() + std::ptrdiff_t(all.size()) / candidates()), all, s);
    }
  }

  void count_replayed_step() override {
    for (size_t i = 0; i < params_.size(); ++i)
      if (stepped_[i]) slots_[i].step += 1;
    if (skips_) ++unsettled_;
  }

  void step() override {
    const float* skip = skip_flag_ptr();  // see Note [AdamW's skipped steps in a captured step]
    RT_CHECK(!skip || device_lr_.defined(), kWho, ": a skip flag needs the scalars in device memory (set_device_lr)");
    if (device_lr_.defined()) {
      const Stream stream = Stream::current(device_lr_.device());
      const bool capturing = cuda::stream_is_capturing(static_cast<cudaStream_t>(stream.handle()));
      if (skip) {
        RT_CHECK(skipped_.defined(), kWho, ": a step with a skip flag needs prepare_device_step() before it");
        RT_CHECK(unsettled_ == 0 || !capturing, kWho,
                 ": a captured step must start with the skipped steps settled (an eager step before the capture)");
        skips_ = true;
      }
      if (!capturing) settle(stream, true);
    }
    std::fill(stepped_.begin(), stepped_.end(), false);
    any_step_ = true;
    // p, g, both moments read; p and both moments written; ~12 flops (decay, moments, sqrt, step).
    run_step<cuda::AdamWTensor>(
        "adamw_step", params_, lr_, kWho, 12, 7,
        [&](size_t i, const Tensor& p, const Tensor& g, CudaUpdates<cuda::AdamWTensor>& on_cuda) {
          Slot& st = slots_[i];
          check_state_before_skip(params_[i].first, p, st.exp_avg.defined(), kWho);
          if (!st.exp_avg.defined()) {
            st.exp_avg = Tensor::zeros(p.shape(), p.dtype(), p.device(), p.format());
            st.exp_avg_sq = Tensor::zeros(p.shape(), p.dtype(), p.device(), p.format());
          }
          st.step += 1;
          stepped_[i] = true;
          cpu::AdamWScalars s;
          s.lr = lr_;
          s.beta1 = opt_.beta1;
          s.beta2 = opt_.beta2;
          s.eps = opt_.eps;
          s.weight_decay = decay_of(params_, i, opt_.weight_decay, opt_.no_decay_1d, opt_.weight_decay_of);
          s.step = st.step;
          const int64_t n = p.numel();
          if (p.device().is_cuda()) {
            cuda::AdamWTensor e;
            e.p = p.raw_data();
            e.g = g.raw_data();
            e.exp_avg = st.exp_avg.raw_data();
            e.exp_avg_sq = st.exp_avg_sq.raw_data();
            e.n = n;
            e.weight_decay = s.weight_decay;
            e.step = s.step;
            on_cuda.add(p, e);
          } else if (p.dtype() == DType::f32) {
            cpu::adamw_update<float>(p.data<float>(), g.data<float>(), st.exp_avg.data<float>(),
                                     st.exp_avg_sq.data<float>(), n, s);
          } else {
            cpu::adamw_update<double>(p.data<double>(), g.data<double>(), st.exp_avg.data<double>(),
                                      st.exp_avg_sq.data<double>(), n, s);
          }
        },
        [&](DType t, const std::vector<cuda::AdamWTensor>& list, cudaStream_t stream) {
          const int k = t == DType::f32 ? 0 : 1;
          cuda::AdamWHyper h = hyper();
          if (device_lr_.defined() && !list.empty()) {  // Note [AdamW's scalars in device memory]
            const std::vector<double> sets = cuda::adamw_scalar_sets(list, h);
            if (sets != prepared_[k]) {
              RT_CHECK(!cuda::stream_is_capturing(stream), kWho, ": the step's scalars differ from those ",
                       "prepare_device_step wrote before it (a parameter without a gradient in a captured step?)");
              write_sets(k, sets, sets, stream);
            }
            h.scalars_on_device = device_sets_.data<double>() + 3 * cuda::kAdamWDeviceSets * k;
            if (skip) h.candidate_on_device = skipped_.data<int64_t>();
          }
          h.skip_if_set = skip;
          cuda::adamw_update(t, list, h, tables_[k], stream);
        });
    if (skip) {
      const auto stream = static_cast<cudaStream_t>(Stream::current(device_lr_.device()).handle());
      cuda::count_if_set(skip, skipped_.data<int64_t>(), stream);
      ++unsettled_;  // this step (or the replay after its capture) may be skipped on the device
    }
  }

  std::map<std::string, Tensor> state() const override {
    // The true counts: settling changes what the host holds, not what it means.
    if (device_lr_.defined()) const_cast<AdamW*>(this)->settle(Stream::current(device_lr_.device()), true);
    std::map<std::string, Tensor> out;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Slot& st = slots_[i];
      if (!st.exp_avg.defined()) continue;
      const std::string& name = params_[i].first;
      out[kExpAvg + "." + name] = st.exp_avg.clone();
      out[kExpAvgSq + "." + name] = st.exp_avg_sq.clone();
      out[kStep + "." + name] = Tensor::from_vector<int64_t>({st.step}, {});
    }
    return out;
  }

  void load_state(const std::map<std::string, Tensor>& state) override {
    StateByParam saved = split_state(state, params_, {kExpAvg, kExpAvgSq, kStep}, kWho);
    std::vector<Slot> restored(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string& name = params_[i].first;
      const Tensor& m = saved[kExpAvg][i];
      const Tensor& v = saved[kExpAvgSq][i];
      const Tensor& step = saved[kStep][i];
      const int present = int(m.defined()) + int(v.defined()) + int(step.defined());
      if (present == 0) continue;  // never stepped with a gradient: starts afresh, like PyTorch
      RT_CHECK(present == 3, kWho, ": the state of '", name, "' is incomplete: expected ", kExpAvg, ".", name, ", ",
               kExpAvgSq, ".", name, " and ", kStep, ".", name, " together");
      restored[i].exp_avg = restore_buffer(m, kExpAvg + "." + name, params_[i].second, kWho);
      restored[i].exp_avg_sq = restore_buffer(v, kExpAvgSq + "." + name, params_[i].second, kWho);
      restored[i].step = restore_step(step, kStep + "." + name);
    }
    slots_ = std::move(restored);  // only once everything checked out
    // The loaded counts are true counts: nothing skipped is left to take off them.
    if (skipped_.defined()) {
      snapshot_done_->synchronize();  // a queued snapshot must not land after the reset
      skipped_.fill_(0.0);            // on the current stream, before any later step
    }
    unsettled_ = 0;
    snapshot_of_ = 0;
  }

 private:
  cuda::AdamWHyper hyper() const {
    cuda::AdamWHyper h;
    h.lr = lr_;
    h.beta1 = opt_.beta1;
    h.beta2 = opt_.beta2;
    h.eps = opt_.eps;
    return h;
  }
  // Writes list k's (f32, f64) scalar sets to device memory, as Note [AdamW's scalars in device memory]
  // says: `all`, the candidates of `sets` (Note [AdamW's skipped steps in a captured step]).
  void write_sets(int k, const std::vector<double>& sets, const std::vector<double>& all, cudaStream_t stream) {
    RT_CHECK(all.size() <= size_t(3 * cuda::kAdamWDeviceSets), kWho, ": ", sets.size() / 3,
             " distinct (weight decay, step count) pairs; a captured step takes at most ",
             cuda::kAdamWDeviceSets / candidates(), all.size() == sets.size() ? "" : " with fp16's loss scaler");
    if (!device_sets_.defined())
      device_sets_ = Tensor::zeros({2 * 3 * cuda::kAdamWDeviceSets}, DType::f64, device_lr_.device());
    cuda::adamw_write_scalars(all, device_sets_.data<double>() + 3 * cuda::kAdamWDeviceSets * k, stream);
    prepared_[k] = sets;
  }

  // The groups of scalar sets prepare_device_step writes: kCandidates once a step skipped on the device.
  int candidates() const { return skips_ ? kCandidates : 1; }

  // Takes back what a passed snapshot read; queues a new snapshot when some replays are
  // unsettled; with `all` (or when the bound would pass the last candidate) waits until every
  // replay is settled (Note [AdamW's skipped steps in a captured step]).
  void settle(const Stream& stream, bool all) {
    if (!skips_) return;
    const auto s = static_cast<cudaStream_t>(stream.handle());
    auto take = [&] {
      if (snapshot_of_ == 0) return;
      snapshot_done_->synchronize();  // has passed, or the caller must wait
      const int64_t n = *snapshot_.data<int64_t>();
      RT_CHECK(n >= 0 && n <= snapshot_of_, kWho, ": the device counted ", n, " skipped steps in ", snapshot_of_,
               " replays");
      if (n > 0) {
        for (size_t i = 0; i < params_.size(); ++i)
          if (stepped_[i]) slots_[i].step -= n;
        cuda::take_count(skipped_.data<int64_t>(), n, s);
      }
      unsettled_ -= snapshot_of_;
      snapshot_of_ = 0;
    };
    auto snapshot = [&] {
      cuda::memcpy_d2h_async(snapshot_.raw_data(), skipped_.raw_data(), sizeof(int64_t), stream.device().index, s);
      snapshot_done_->record(stream);
      snapshot_of_ = unsettled_;
    };
    // The coming step reads candidate skipped_ <= unsettled_: at most the last one.
    const bool wait = all ? unsettled_ > 0 : unsettled_ >= kCandidates;
    if (snapshot_of_ > 0 && (wait || snapshot_done_->query())) take();
    if (all ? unsettled_ > 0 : unsettled_ >= kCandidates) {
      snapshot();
      take();  // the device's queue drains: with snapshots every kCandidates / 2 replays, rare
    } else if (!all && snapshot_of_ == 0 && unsettled_ >= kCandidates / 2) {
      snapshot();
    }
  }

  // Replays a snapshot may lag behind (Note [AdamW's skipped steps in a captured step]).
  static constexpr int kCandidates = 8;

  AdamWOptions opt_;
  std::vector<Slot> slots_;
  cuda::MultiTensorTable tables_[2];  // the f32 and f64 lists on the device
  std::vector<bool> stepped_;         // [param] it took the last step (had a gradient)
  bool any_step_ = false;
  Tensor device_sets_;              // (2 x 3 x kAdamWDeviceSets,) f64: the f32 list's sets, then the f64 list's
  std::vector<double> prepared_[2];  // what device_sets_ holds, per list (its first candidate)
  // The tensors of Note [AdamW's skipped steps in a captured step], made by the first prepare_device_step().
  bool skips_ = false;                    // a step had a skip flag
  Tensor skipped_;                        // (1,) i64 on the device: skipped steps the host still counts
  Tensor snapshot_;                       // (1,) i64, pinned: a copy of skipped_
  std::unique_ptr<Event> snapshot_done_;  // recorded after the copy
  int64_t snapshot_of_ = 0;               // unsettled_ when the pending snapshot was taken; 0: none pending
  int64_t unsettled_ = 0;                 // replays not yet taken back: skipped_ is at most this
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(nn::NamedTensors params, const AdamWOptions& opt) {
  check_options(opt);
  return make_checked<AdamW>(std::move(params), opt, kWho);
}

}  // namespace rt::optim
