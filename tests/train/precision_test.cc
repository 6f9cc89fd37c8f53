// Mixed precision's machinery on the CPU (Note [Compute copies], Note [Precision]): the
// same code as bf16/fp16 on a GPU, with f64 masters and f32 compute. The yardstick for
// "tracks the f64 run" is a plain f32 run's own distance from it (docs/numerics.md).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/nn/compute_copies.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "optim/optimizer.h"
#include "train/precision.h"
#include "tests/models/tiny_resnet.h"

namespace rt {
namespace {

using train::MixedPrecision;
using train::MixedPrecisionOptions;

// A width-4 ResNet18 with the small stem for 1x8x8 images, 4 classes, in `dtype`: every
// BasicBlock, downsample and batch norm of the real thing, small enough for a unit test.
std::shared_ptr<nn::Module> tiny_model(DType dtype) {
  auto m = test::tiny_resnet18({.seed = 7});
  m->to(dtype);
  m->to(Device::cpu(), MemoryFormat::channels_last);
  return m;
}

struct Batch {
  Tensor x32, x64, labels;  // the same values as f32 and f64
};

// Well conditioned (docs/numerics.md): a batch of 16, the same one every step.
Batch batch(uint64_t seed) {
  Generator g(seed);
  Batch b;
  b.x32 = randn({16, 1, 8, 8}, g).to(MemoryFormat::channels_last);
  b.x64 = b.x32.to(DType::f64);
  b.labels = randint({16}, g, 0, 4);
  return b;
}

std::unique_ptr<optim::Optimizer> sgd(const nn::Module& m) {
  optim::SgdOptions o;
  o.lr = 1e-3;
  o.momentum = 0.9;
  o.weight_decay = 1e-2;
  return optim::make_sgd(m.named_parameters(), o);
}

MixedPrecisionOptions f32_compute(bool loss_scaling = false) {
  MixedPrecisionOptions o;
  o.compute = DType::f32;
  o.loss_scaling = loss_scaling;
  return o;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.contiguous().to_vector<double>() == b.contiguous().to_vector<double>();
}

// `steps` SGD steps of `accum` micro-batches each through MixedPrecision; the losses.
std::vector<double> run(nn::Module& model, const MixedPrecisionOptions& o, const std::vector<Batch>& micro, int steps) {
  auto opt = sgd(model);
  MixedPrecision mp(model, o);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    double step_loss = 0;
    for (const Batch& b : micro) {
      const Tensor x = mp.input_dtype() == DType::f32 ? b.x32 : b.x64;
      Tensor loss = cross_entropy(mp.forward(x), b.labels);
      step_loss += loss.item() / double(micro.size());
      mp.backward(mul(loss, 1.0 / double(micro.size())));
    }
    REQUIRE(mp.step(*opt));
    opt->zero_grad();
    losses.push_back(step_loss);
  }
  return losses;
}

TEST_CASE("f64 masters with f32 compute track a pure f64 run as closely as a plain f32 run does") {
  const std::vector<Batch> micro = {batch(1), batch(2)};  // --accum-steps 2
  auto ref = tiny_model(DType::f64), mixed = tiny_model(DType::f64), plain = tiny_model(DType::f32);
  MixedPrecisionOptions as_is;
  as_is.compute = DType::f64;
  const std::vector<double> l_ref = run(*ref, as_is, micro, 3);
  const std::vector<double> l_mixed = run(*mixed, f32_compute(), micro, 3);
  const std::vector<double> l_plain = run(*plain, f32_compute(), micro, 3);

  for (size_t s = 0; s < l_ref.size(); ++s) {
    CHECK(l_mixed[s] == doctest::Approx(l_ref[s]).epsilon(1e-5));
    CHECK(l_plain[s] == doctest::Approx(l_ref[s]).epsilon(1e-5));
  }
  const auto sr = ref->state_dict(), sm = mixed->state_dict(), sp = plain->state_dict();
  int compared = 0;
  for (size_t i = 0; i < sr.size(); ++i) {
    const auto& [name, r] = sr[i];
    const Tensor& m = sm[i].second;
    if (!is_floating(r.dtype())) continue;
    CHECK_MESSAGE(m.dtype() == DType::f64, name, " is ", m.str(), ": masters and buffers stay f64");
    // The distance to f64 of the mixed run within 3x the plain f32 run's (+ f32 rounding of
    // the values themselves, which the f64 masters do not have).
    const double err_mixed = max_abs_diff(m, r), err_plain = max_abs_diff(sp[i].second, r);
    CHECK_MESSAGE(err_mixed <= 3 * err_plain + 1e-7, name, ": mixed ", err_mixed, " vs plain f32 ", err_plain);
    ++compared;
  }
  CHECK(compared > 60);  // every conv, batch norm (with running statistics) and the fc
}

TEST_CASE("working copies: f32 values of the masters, own storage; gradients sum in f64 over micro-batches") {
  auto model = tiny_model(DType::f64);
  const std::vector<Batch> micro = {batch(3), batch(4)};
  // The reference: the same micro-batches through the f64 model itself.
  auto ref = tiny_model(DType::f64);
  for (const Batch& b : micro) mul(cross_entropy(ref->forward(b.x64), b.labels), 0.5).backward();

  nn::ComputeCopies cc(*model, DType::f32);
  REQUIRE(cc.copies().size() == model->compute_parameters().size());
  CHECK(cc.copies().size() < model->named_parameters().size());  // batch norm has none
  for (const auto& [name, p] : model->compute_parameters()) CHECK(name.find("bn") == std::string::npos);
  cc.refresh();
  for (size_t i = 0; i < cc.copies().size(); ++i) {
    const Tensor &m = cc.masters()[i].second, &c = cc.copies()[i].second;
    CHECK(c.dtype() == DType::f32);
    CHECK(c.format() == m.format());
    CHECK(c.impl().storage != m.impl().storage);
    CHECK(same_bits(c, m.to(DType::f32)));
  }

  // Each micro-batch's copy gradients (f32), widened, add up exactly in the masters'.
  std::vector<Tensor> want(cc.copies().size());
  for (const Batch& b : micro) {
    mul(cross_entropy(nn::cast(model->forward(b.x32), DType::f64), b.labels), 0.5).backward();
    for (size_t i = 0; i < want.size(); ++i) {
      const Tensor g = cc.copies()[i].second.grad();
      REQUIRE(g.defined());
      CHECK(g.dtype() == DType::f32);
      const Tensor wide = g.to(DType::f64);
      if (want[i].defined()) add_(want[i], wide);
      else want[i] = wide.clone();
    }
    cc.accumulate_grads();
    for (const auto& [name, c] : cc.copies()) CHECK_MESSAGE(!c.grad().defined(), name);
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const Tensor g = cc.masters()[i].second.grad();
    REQUIRE(g.defined());
    CHECK(g.dtype() == DType::f64);
    CHECK_MESSAGE(same_bits(g, want[i]), cc.masters()[i].first);
  }
  // And every master gradient (batch norm's too, which arrive through the cast) agrees
  // with the f64 model's to f32 accuracy.
  const auto pm = model->named_parameters(), pr = ref->named_parameters();
  for (size_t i = 0; i < pm.size(); ++i) {
    const Tensor g = pm[i].second.grad(), r = pr[i].second.grad();
    REQUIRE(g.defined());
    CHECK(g.dtype() == DType::f64);
    const double scale = std::max(1e-3, max_abs_diff(r, Tensor::zeros(r.shape(), DType::f64)));
    CHECK_MESSAGE(max_abs_diff(g, r) <= 1e-4 * scale, pm[i].first);
  }
}

TEST_CASE("the copies are cast once per step and follow the masters after each step") {
  auto model = tiny_model(DType::f64);
  auto opt = sgd(*model);
  MixedPrecision mp(*model, f32_compute());
  const Batch b = batch(5);
  mp.backward(cross_entropy(mp.forward(b.x32), b.labels));
  REQUIRE(mp.step(*opt));
  opt->zero_grad();
  // The next forward sees the updated masters: the same as a fresh MixedPrecision.
  const Tensor after = mp.forward(b.x32);
  auto twin = tiny_model(DType::f64);
  twin->load_state_dict([&] {
    std::map<std::string, Tensor> s;
    for (const auto& [k, t] : model->state_dict()) s[k] = t;
    return s;
  }());
  NoGradGuard ng;
  MixedPrecision fresh(*twin, f32_compute());
  CHECK(after.dtype() == DType::f64);
  CHECK(max_abs_diff(after, fresh.forward(b.x32)) == 0.0);
  CHECK_THROWS_WITH_AS(mp.forward(b.x64), doctest::Contains("compute dtype is f32"), Error);
}

TEST_CASE("loss scaling: an inf gradient skips the step and halves the scale; clean steps grow it") {
  auto model = tiny_model(DType::f64);
  auto opt = sgd(*model);
  MixedPrecisionOptions o = f32_compute(true);
  o.scaler.growth_interval = 2;
  MixedPrecision mp(*model, o);
  CHECK(mp.loss_scale() == 65536.0);
  const Batch b = batch(6);
  std::vector<Tensor> before;
  for (const auto& [name, p] : model->named_parameters()) before.push_back(p.clone());

  // A forced inf in one master gradient.
  mp.backward(cross_entropy(mp.forward(b.x32), b.labels));
  model->named_parameters()[5].second.grad().data<double>()[0] = std::numeric_limits<double>::infinity();
  CHECK_FALSE(mp.step(*opt));
  opt->zero_grad();
  CHECK(mp.loss_scale() == 32768.0);
  CHECK(mp.state().at("growth_tracker").item() == 0);
  const auto ps = model->named_parameters();
  for (size_t i = 0; i < ps.size(); ++i) CHECK_MESSAGE(same_bits(ps[i].second, before[i]), ps[i].first);

  // A clean step: the unscaled gradients are those of the unscaled loss (a power-of-two
  // scale is exact), and the step is taken.
  auto twin = tiny_model(DType::f64);
  MixedPrecision plain(*twin, f32_compute());
  plain.backward(cross_entropy(plain.forward(b.x32), b.labels));
  mp.backward(cross_entropy(mp.forward(b.x32), b.labels));
  CHECK(mp.step(*opt));
  for (size_t i = 0; i < ps.size(); ++i)
    CHECK_MESSAGE(max_abs_diff(ps[i].second.grad(), twin->named_parameters()[i].second.grad()) <= 1e-12,
                  ps[i].first);
  opt->zero_grad();
  CHECK(mp.loss_scale() == 32768.0);
  CHECK(mp.state().at("growth_tracker").item() == 1);
  mp.backward(cross_entropy(mp.forward(b.x32), b.labels));
  CHECK(mp.step(*opt));
  opt->zero_grad();
  CHECK(mp.loss_scale() == 65536.0);  // 2 clean steps in a row: grown

  // The state resumes exactly; it is required exactly when loss scaling is on.
  mp.backward(cross_entropy(mp.forward(b.x32), b.labels));
  CHECK(mp.step(*opt));
  auto other = tiny_model(DType::f64);
  MixedPrecision resumed(*other, o);
  resumed.load_state(mp.state());
  CHECK(resumed.loss_scale() == 65536.0);
  CHECK(resumed.state().at("growth_tracker").item() == 1);
  CHECK_THROWS_WITH_AS(resumed.load_state({}), doctest::Contains("no loss-scaler state"), Error);
  MixedPrecision unscaled(*other, f32_compute());
  CHECK_THROWS_WITH_AS(unscaled.load_state(mp.state()), doctest::Contains("no loss scaling"), Error);
  CHECK(unscaled.state().empty());
}

TEST_CASE("--precision: auto is fp32 on the CPU, bf16/fp16 there are errors, the options per precision") {
  using train::Precision;
  CHECK(train::resolve_precision("auto", Device::cpu()) == Precision::fp32);
  CHECK(train::resolve_precision("fp32", Device::cpu()) == Precision::fp32);
  CHECK(train::resolve_precision("tf32", Device::cpu()) == Precision::tf32);
  for (const char* p : {"bf16", "fp16"})
    CHECK_THROWS_WITH_AS(train::resolve_precision(p, Device::cpu()), doctest::Contains("--precision fp32"),
                         Error);
  CHECK(train::mixed_precision_options(Precision::bf16).compute == DType::bf16);
  CHECK_FALSE(train::mixed_precision_options(Precision::bf16).loss_scaling);
  CHECK(train::mixed_precision_options(Precision::fp16).compute == DType::f16);
  CHECK(train::mixed_precision_options(Precision::fp16).loss_scaling);
  CHECK(train::mixed_precision_options(Precision::tf32).compute == DType::f32);
  CHECK(std::string(train::precision_name(Precision::fp16)) == "fp16");
  // fp32 through MixedPrecision is the plain step: no copies, the model's own output.
  auto model = tiny_model(DType::f32);
  MixedPrecision mp(*model, train::mixed_precision_options(Precision::fp32));
  const Batch b = batch(8);
  NoGradGuard ng;
  CHECK(same_bits(mp.forward(b.x32), model->forward(b.x32)));
}

}  // namespace
}  // namespace rt
