// LossMeter (Note [Loss on the device]): read each step, its sums are the plain host
// arithmetic; kept on the device (exercised here with CPU tensors), the same sums with a
// single read per window, skipped and incomplete steps dropped alike.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "train/loss_meter.h"

namespace rt::train {
namespace {

Tensor loss_of(double v) { return Tensor::scalar(v, DType::f32); }

// Feeds steps of `accum` losses; step i stands unless listed in `skipped`.
void feed(LossMeter& m, const std::vector<std::vector<double>>& steps, const std::vector<bool>& stood) {
  for (size_t i = 0; i < steps.size(); ++i) {
    for (double v : steps[i]) m.add(loss_of(v), int64_t(steps[i].size()));
    m.end_step(stood[i]);
  }
}

TEST_CASE("read each step: the sum is the host arithmetic, and each loss is returned") {
  LossMeter m(true);
  const std::optional<double> l = m.add(loss_of(2.5), 2);
  REQUIRE(l.has_value());
  CHECK(*l == 2.5);
  m.add(loss_of(0.1), 2);
  m.end_step(true);
  m.add(loss_of(7.0), 2);  // an incomplete step (end of epoch): dropped
  m.end_step(false);
  const double expected = 0.0 + (0.0 + 2.5 / 2.0 + double(0.1f) / 2.0);
  CHECK(m.window_sum() == expected);
  m.reset_window();
  CHECK(m.window_sum() == 0.0);
}

TEST_CASE("kept on the device: the same sums as read each step; nothing is returned") {
  const std::vector<std::vector<double>> steps = {{2.3, 2.1}, {1.9, 1.7}, {9.0, 9.0}, {1.5, 1.25}};
  const std::vector<bool> stood = {true, true, false, true};
  LossMeter host(true), dev(false);
  CHECK(!dev.add(loss_of(1.0), 1).has_value());
  dev.end_step(false);
  feed(host, steps, stood);
  feed(dev, steps, stood);
  CHECK(dev.window_sum() == doctest::Approx(host.window_sum()).epsilon(1e-15));
  CHECK(dev.window_sum() == doctest::Approx((2.3 + 2.1 + 1.9 + 1.7 + 1.5 + 1.25) / 2).epsilon(1e-6));
  dev.reset_window();
  CHECK(dev.window_sum() == 0.0);
  feed(dev, {{3.0}}, {true});
  CHECK(dev.window_sum() == 3.0);
}

TEST_CASE("kept on the device: a NaN loss shows in the window sum") {
  LossMeter dev(false);
  feed(dev, {{1.0}, {NAN}, {1.0}}, {true, true, true});
  CHECK(std::isnan(dev.window_sum()));
  dev.reset_window();
  feed(dev, {{1.0}}, {true});
  CHECK(dev.window_sum() == 1.0);
}

}  // namespace
}  // namespace rt::train
