// GradScaler (optim/grad_scaler.h): torch's rules (unscale, skip on inf/NaN, backoff and
// growth) with its state on the CPU and, where there is a GPU (or under --config=cuda-emu),
// in device memory; and a captured step (Note [Loss scaling in a captured step] in
// optim/grad_scaler.cc): replays that skip an overflowing update on the device and move the
// scale exactly as eager steps do (SGD, LARS, and AdamW, whose host step counts learn which
// replays were skipped: Note [AdamW's skipped steps in a captured step] in optim/adamw.cc),
// and what cannot skip there refused.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/cuda_graph.h"
#include "engine/ops.h"
#include "engine/stream.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;
using optim::GradScaler;
using optim::GradScalerOptions;

constexpr float kInf = std::numeric_limits<float>::infinity();

// The devices a rules case runs on: the CPU, and the GPU where there is one.
std::vector<Device> devices(const char* test) {
  std::vector<Device> d = {Device::cpu()};
  if (have_gpu(test)) d.push_back(gpu());
  return d;
}

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

nn::NamedTensors small_params(Device d) {
  return {{"w", Tensor::from_vector<float>({1.0f, 2.0f, 3.0f}, {3}).to(d)},
          {"b", Tensor::from_vector<float>({0.5f}, {1}).to(d)}};
}

void give(nn::NamedTensors& ps, float gw, float gb) {
  const Device d = ps[0].second.device();
  ps[0].second.set_grad(Tensor::full({3}, gw, DType::f32, d));
  ps[1].second.set_grad(Tensor::full({1}, gb, DType::f32, d));
}

// By hand: the scaler's state over steps (skip, backoff, growth), no op to compare.
TEST_CASE("GradScaler: PyTorch's defaults, unscale, skip on inf/nan, backoff and growth (CPU and CUDA)") {
  for (const Device d : devices("GradScaler rules on CUDA")) {
    CAPTURE(d.str());
    GradScaler def(GradScalerOptions{}, d);
    CHECK(def.get_scale() == 65536.0);
    CHECK(def.scale(Tensor::full({}, 2.0, DType::f32, d)).item() == 131072.0);
    CHECK(def.skipped_steps() == 0);

    GradScalerOptions o;
    o.growth_interval = 3;
    GradScaler scaler(o, d);
    nn::NamedTensors ps = small_params(d);
    optim::SgdOptions so;
    so.lr = 1.0;
    auto opt = optim::make_sgd(ps, so);

    // A clean step: grads divided by the scale, then the step runs.
    give(ps, 65536.0f * 0.25f, 65536.0f);
    CHECK(scaler.step(*opt));
    CHECK(values(ps[0].second) == std::vector<float>{0.75f, 1.75f, 2.75f});
    CHECK(values(ps[1].second) == std::vector<float>{-0.5f});
    scaler.update();
    CHECK(scaler.get_scale() == 65536.0);
    CHECK(scaler.growth_tracker() == 1);

    // inf: the step is skipped, the parameters keep their values, the scale halves.
    give(ps, kInf, 1.0f);
    CHECK_FALSE(scaler.step(*opt));
    CHECK(values(ps[0].second) == std::vector<float>{0.75f, 1.75f, 2.75f});
    scaler.update();
    CHECK(scaler.get_scale() == 32768.0);
    CHECK(scaler.growth_tracker() == 0);
    CHECK(scaler.skipped_steps() == 1);

    // NaN in another parameter: skipped too.
    give(ps, 1.0f, std::numeric_limits<float>::quiet_NaN());
    CHECK(scaler.unscale(*opt));
    CHECK_THROWS_WITH_AS(scaler.unscale(*opt), doctest::Contains("already ran"), Error);
    CHECK_FALSE(scaler.step(*opt));
    scaler.update();
    CHECK(scaler.get_scale() == 16384.0);
    CHECK(scaler.skipped_steps() == 2);

    // growth_interval clean steps in a row: the scale doubles, the tracker restarts.
    for (int i = 0; i < 3; ++i) {
      give(ps, 0.0f, 0.0f);
      CHECK(scaler.step(*opt));
      scaler.update();
    }
    CHECK(scaler.get_scale() == 32768.0);
    CHECK(scaler.growth_tracker() == 0);
    CHECK_THROWS_WITH_AS(scaler.update(), doctest::Contains("needs a step() or unscale() first"), Error);

    // The state a checkpoint keeps, restored into a fresh scaler on the same device.
    GradScaler back(o, d);
    give(ps, 0.0f, 0.0f);
    CHECK(scaler.step(*opt));
    scaler.update();
    back.load_state(scaler.state());
    CHECK(back.get_scale() == 32768.0);
    CHECK(back.growth_tracker() == 1);
  }
}

// By hand: the scaler's state over many steps, no op to compare.
TEST_CASE("GradScaler: the scale never grows to inf (CPU and CUDA)") {
  for (const Device d : devices("GradScaler growth on CUDA")) {
    CAPTURE(d.str());
    GradScalerOptions o;
    o.init_scale = 3e38;
    o.growth_interval = 1;
    GradScaler scaler(o, d);
    nn::NamedTensors ps = small_params(d);
    auto opt = optim::make_sgd(ps, {});
    give(ps, 0.0f, 0.0f);
    CHECK(scaler.step(*opt));
    scaler.update();
    CHECK(scaler.get_scale() == double(3e38f));
  }
}

TEST_CASE("GradScaler: gradients on another device than the scaler's are refused") {
  GradScaler scaler;  // the CPU's
  nn::NamedTensors ps = small_params(Device::cpu());
  auto opt = optim::make_sgd(ps, {});
  if (!have_gpu("GradScaler device mismatch")) return;
  ps[0].second.set_grad(Tensor::zeros({3}, DType::f32, gpu()));
  CHECK_THROWS_WITH_AS(scaler.unscale(*opt), doctest::Contains("construct it with the gradients' device"), Error);
}

// One parameter set stepped by a captured graph and its twin stepped eagerly, with the same
// gradients every step (some with inf or NaN): the captured step writes its gradients into
// fixed buffers, as a training step's graph does.
struct Twin {
  nn::NamedTensors ps;
  std::unique_ptr<optim::Optimizer> opt;
  GradScaler scaler;
  Twin(const std::string& kind, const GradScalerOptions& o)
      : ps({{"w", rnd({3, 5}, 1).to(DType::f32).to(gpu())}, {"b", rnd({5}, 2).to(DType::f32).to(gpu())}}),
        opt(make(kind, ps)),
        scaler(o, gpu()) {}
  static std::unique_ptr<optim::Optimizer> make(const std::string& kind, const nn::NamedTensors& ps) {
    if (kind == "adamw") {
      optim::AdamWOptions a;
      a.lr = 0.01;
      a.weight_decay = 0.05;
      a.no_decay_1d = true;  // two scalar sets: w decayed, b not
      return optim::make_adamw(ps, a);
    }
    if (kind == "lars") {
      optim::LarsOptions l;
      l.exclude_bn_bias = false;
      return optim::make_lars(ps, l);
    }
    optim::SgdOptions s;
    s.lr = 0.5;
    s.momentum = 0.9;
    s.weight_decay = 0.01;
    return optim::make_sgd(ps, s);
  }
};

// The steps whose gradients hold an inf or NaN: single ones, a pair, and a run longer than
// the replays AdamW's snapshot of its skipped steps may lag behind (8), so the host must wait
// for one there.
bool overflows(int k) { return k == 2 || k == 5 || k == 6 || (k >= 10 && k <= 19) || k == 22; }

// Step k's gradients: random, times a large factor (the loss scale), with an inf or NaN in
// the overflowing steps.
std::vector<Tensor> grads_of(int k) {
  Tensor w = mul(rnd({3, 5}, 100 + uint64_t(k)), 3000.0).to(DType::f32);
  Tensor b = mul(rnd({5}, 200 + uint64_t(k)), 3000.0).to(DType::f32);
  if (overflows(k)) {
    if (k % 3 == 0) w.data<float>()[k % 15] = kInf;
    if (k % 3 == 1) b.data<float>()[k % 5] = std::numeric_limits<float>::quiet_NaN();
    if (k % 3 == 2) w.data<float>()[k % 15] = -kInf;
  }
  return {w, b};
}

void check_same_bits(const nn::NamedTensors& a, const nn::NamedTensors& b, const std::string& what) {
  for (size_t i = 0; i < a.size(); ++i) check_on_gpu(a[i].second, b[i].second.to(Device::cpu()), kExact, what);
}

// The optimizers' states with the same bits (AdamW's step counts among them).
void check_same_state(const optim::Optimizer& got, const optim::Optimizer& want, const std::string& what) {
  const auto sg = got.state(), sw = want.state();
  REQUIRE(sg.size() == sw.size());
  for (const auto& [name, t] : sw) {
    REQUIRE(sg.count(name));
    if (t.dtype() == DType::i64)
      CHECK_MESSAGE(sg.at(name).to_vector<int64_t>() == t.to_vector<int64_t>(), what, ": ", name);
    else
      check_on_gpu(sg.at(name), t.to(Device::cpu()), kExact, what + ": " + name);
  }
}

// By hand: captured replays against eager steps, both on the GPU.
TEST_CASE("GradScaler in a captured step: replays skip an overflowing update on the device, as eager steps do") {
  if (!have_gpu("GradScaler captured")) return;
  GradScalerOptions o;
  o.init_scale = 4096.0;
  o.growth_interval = 2;  // growth between the overflows
  for (const std::string kind : {"sgd", "lars", "adamw"}) {
    CAPTURE(kind);
    const Stream stream = Stream::create(gpu());
    const StreamGuard on(stream);
    Twin eager(kind, o), graphed(kind, o);
    // The graphed set's update reads its lr (AdamW: its scalars) from device memory, written
    // before every step as a training step does (Note [The learning rate in device memory]).
    graphed.opt->set_device_lr(Tensor::full({1}, graphed.opt->lr(), DType::f64, gpu()));
    // The graphed set's gradients and loss live in fixed buffers.
    std::vector<Tensor> gbuf = {Tensor::zeros({3, 5}, DType::f32, gpu()), Tensor::zeros({5}, DType::f32, gpu())};
    for (size_t i = 0; i < gbuf.size(); ++i) graphed.ps[i].second.set_grad(gbuf[i]);
    const Tensor loss = Tensor::full({}, 1.75, DType::f32, gpu());
    auto feed = [&](int k) {
      const std::vector<Tensor> g = grads_of(k);
      for (size_t i = 0; i < g.size(); ++i) {
        gbuf[i].copy_(g[i].to(gpu()));
        eager.ps[i].second.set_grad(g[i].to(gpu()));
      }
    };
    auto eager_step = [](Twin& t, const Tensor& l) {
      Tensor scaled = t.scaler.scale(l);
      t.scaler.step(*t.opt);
      t.scaler.update();
      return scaled;
    };
    // Step 0 eagerly on both: the optimizers make their state (Note [Skipping an update on the device]).
    feed(0);
    eager_step(eager, loss);
    graphed.opt->prepare_device_step();
    eager_step(graphed, loss);
    CudaGraph graph;
    Tensor scaled;  // the graph's output: the loss times the scale of its step
    graphed.opt->prepare_device_step();
    graph.capture(stream, [&] { scaled = eager_step(graphed, loss); });
    for (int k = 1; k <= 24; ++k) {
      CAPTURE(k);
      feed(k);
      const double scale_before = eager.scaler.get_scale();
      const Tensor before = graphed.ps[0].second.to(Device::cpu());
      const Tensor want = eager_step(eager, loss);
      if (k > 1) graphed.opt->prepare_device_step();  // the first replay's came before the capture
      graph.replay(stream);
      if (k > 1) graphed.opt->count_replayed_step();  // the capture's step() counted the first
      check_same_bits(graphed.ps, eager.ps, "parameters after step " + std::to_string(k));
      check_on_gpu(scaled, want.to(Device::cpu()), kExact, "scaled loss");
      CHECK(scaled.item() == 1.75 * scale_before);
      CHECK(graphed.scaler.get_scale() == eager.scaler.get_scale());
      CHECK(graphed.scaler.growth_tracker() == eager.scaler.growth_tracker());
      CHECK(graphed.scaler.skipped_steps() == eager.scaler.skipped_steps());
      if (overflows(k)) {
        CHECK(graphed.scaler.get_scale() == scale_before / 2);
        check_on_gpu(graphed.ps[0].second, before, kExact, "a skipped step changes nothing");
      } else {
        CHECK_FALSE(values(graphed.ps[0].second) == values(before));
      }
      // Mid-way, inside the long run of overflows too: the state a checkpoint would take,
      // then the replays go on.
      if (k == 8 || k == 15) check_same_state(*graphed.opt, *eager.opt, "state after step " + std::to_string(k));
    }
    CHECK(graphed.scaler.skipped_steps() == 14);
    check_same_state(*graphed.opt, *eager.opt, "state at the end");
    if (kind == "adamw") CHECK(eager.opt->state().at("step.w").to_vector<int64_t>() == std::vector<int64_t>{11});
    stream.synchronize();
  }
}

TEST_CASE("GradScaler in a captured step: what cannot skip an update on the device is refused") {
  if (!have_gpu("GradScaler captured refusals")) return;
  const Stream stream = Stream::create(gpu());
  const StreamGuard on(stream);
  auto capture_step = [&](nn::NamedTensors& ps, optim::Optimizer& opt) {
    for (auto& [name, p] : ps) p.set_grad(Tensor::zeros(p.shape(), DType::f32, gpu()));
    GradScaler scaler(GradScalerOptions{}, gpu());
    scaler.step(opt);  // the tables and state of an eager step
    scaler.update();
    CudaGraph graph;
    graph.capture(stream, [&] {
      scaler.step(opt);
      scaler.update();
    });
  };
  {  // AdamW reads its step counts' scalars from device memory only with a device lr.
    nn::NamedTensors ps = small_params(gpu());
    auto opt = optim::make_adamw(ps, {});
    CHECK_THROWS_WITH_AS(capture_step(ps, *opt), doctest::Contains("needs the scalars in device memory"), Error);
  }
  {  // SGD's first momentum step makes its buffer from the gradient.
    nn::NamedTensors ps = small_params(gpu());
    optim::SgdOptions so;
    so.momentum = 0.9;
    auto opt = optim::make_sgd(ps, so);
    opt->set_skip_flag(Tensor::zeros({1}, DType::f32, gpu()));
    for (auto& [name, p] : ps) p.set_grad(Tensor::zeros(p.shape(), DType::f32, gpu()));
    CHECK_THROWS_WITH_AS(opt->step(), doctest::Contains("has no state yet"), Error);
    CHECK_THROWS_WITH_AS(opt->set_skip_flag(Tensor::zeros({2}, DType::f32, gpu())),
                         doctest::Contains("one f32 value on a CUDA device"), Error);
  }
  stream.synchronize();
}

}  // namespace
}  // namespace rt
