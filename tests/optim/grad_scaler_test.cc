// GradScaler's checkpoint state (its rules are tested in tests/cuda/optim_cuda_test.cc,
// which also runs without a GPU): a resumed scaler continues exactly, bad states are refused.
#include <doctest/doctest.h>

#include <limits>

#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace rt {
namespace {

using optim::GradScaler;
using optim::GradScalerOptions;

// One step of `scaler` on a one-parameter SGD with gradient `g`; whether it stepped.
bool step_with(GradScaler& scaler, optim::Optimizer& opt, double g) {
  Tensor w = opt.params()[0].second;
  w.set_grad(Tensor::full({2}, g, DType::f32));
  const bool stepped = scaler.step(opt);
  scaler.update();
  opt.zero_grad();
  return stepped;
}

TEST_CASE("GradScaler state: saved and restored exactly; the restored scaler continues the same way") {
  GradScalerOptions o;
  o.growth_interval = 3;
  GradScaler a(o);
  nn::NamedTensors ps = {{"w", Tensor::full({2}, 1.0, DType::f32)}};
  auto opt = optim::make_sgd(ps, {});
  CHECK_FALSE(step_with(a, *opt, std::numeric_limits<double>::infinity()));  // backoff: 32768
  CHECK(step_with(a, *opt, 1.0));
  CHECK(step_with(a, *opt, 1.0));  // 2 of 3 clean steps

  const auto s = a.state();
  REQUIRE(s.size() == 2);
  CHECK(s.at("scale").dtype() == DType::f32);
  CHECK(s.at("scale").item() == 32768.0);
  CHECK(s.at("growth_tracker").dtype() == DType::i64);
  CHECK(s.at("growth_tracker").item() == 2);

  GradScaler b(o);
  b.load_state(s);
  CHECK(b.get_scale() == 32768.0);
  CHECK(b.growth_tracker() == 2);
  CHECK(step_with(a, *opt, 1.0));
  CHECK(step_with(b, *opt, 1.0));
  CHECK(a.get_scale() == 65536.0);  // the third clean step grows both
  CHECK(b.get_scale() == 65536.0);
}

TEST_CASE("GradScaler state: missing, extra or out-of-range entries and half-done steps are refused") {
  GradScaler g;
  const auto good = g.state();
  auto without = good;
  without.erase("growth_tracker");
  CHECK_THROWS_WITH_AS(g.load_state(without), doctest::Contains("no 'growth_tracker'"), Error);
  auto extra = good;
  extra["found_inf"] = Tensor::scalar(0.0);
  CHECK_THROWS_WITH_AS(g.load_state(extra), doctest::Contains("unexpected state entry 'found_inf'"), Error);
  auto bad_scale = good;
  bad_scale["scale"] = Tensor::scalar(0.0);
  CHECK_THROWS_WITH_AS(g.load_state(bad_scale), doctest::Contains("finite and > 0"), Error);
  auto bad_tracker = good;
  bad_tracker["growth_tracker"] = Tensor::scalar(2000, DType::i64);
  CHECK_THROWS_WITH_AS(g.load_state(bad_tracker), doctest::Contains("growth_tracker"), Error);
  CHECK(g.get_scale() == 65536.0);  // unchanged by the refusals

  nn::NamedTensors ps = {{"w", Tensor::full({2}, 1.0, DType::f32)}};
  auto opt = optim::make_sgd(ps, {});
  ps[0].second.set_grad(Tensor::full({2}, 1.0, DType::f32));
  g.unscale(*opt);
  CHECK_THROWS_WITH_AS(g.state(), doctest::Contains("half done"), Error);
  CHECK_THROWS_WITH_AS(g.load_state(good), doctest::Contains("half done"), Error);
}

}  // namespace
}  // namespace rt
