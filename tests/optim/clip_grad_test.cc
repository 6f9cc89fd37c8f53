// clip_grad_norm (torch.nn.utils.clip_grad_norm_, norm_type 2) against a direct f64
// computation: clipping above the threshold, nothing changed below it, parameters without
// gradients skipped, errors.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/tensor.h"
#include "optim/clip_grad.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::check_close;
using test::rnd;
using test::tol_for;

const std::vector<Shape> kShapes = {{4, 3}, {5}, {2, 3, 2, 2}, {1}, {7, 1}, {40000}};

// Parameters with gradients rnd * grad_scale in dtype t; parameter `no_grad` gets none.
nn::NamedTensors make_params(DType t, double grad_scale, int no_grad = -1) {
  nn::NamedTensors ps;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    ps.push_back({"p" + std::to_string(i), rnd(kShapes[i], 5 + i).to(t)});
    if (int(i) != no_grad) ps.back().second.set_grad(mul(rnd(kShapes[i], 50 + i), grad_scale).to(t));
  }
  return ps;
}

// The direct f64 computation: the total norm over every element of every gradient.
double direct_total(const nn::NamedTensors& ps) {
  double s = 0.0;
  for (const auto& [name, p] : ps)
    if (p.grad().defined())
      for (double v : p.grad().to_vector<double>()) s += v * v;
  return std::sqrt(s);
}

TEST_CASE("clip_grad_norm above the threshold: total norm and scaled gradients (f64, f32)") {
  for (DType t : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(t));
    for (int no_grad : {-1, 2}) {
      CAPTURE(no_grad);
      nn::NamedTensors ps = make_params(t, 3.0, no_grad);
      const double want_total = direct_total(ps);  // on the values the dtype holds
      const double max_norm = 0.25 * want_total;
      const double coef = max_norm / (want_total + 1e-6);
      std::vector<std::vector<double>> before;
      for (const auto& [name, p] : ps)
        before.push_back(p.grad().defined() ? p.grad().to_vector<double>() : std::vector<double>{});
      const Tensor total = optim::clip_grad_norm(ps, max_norm);
      CHECK(total.ndim() == 0);
      CHECK(total.dtype() == t);
      CHECK(total.device() == Device::cpu());
      // A sum over ~40000 terms: the f32 total is compared at scale sqrt(terms) (Note [Tolerances]).
      check_close(total, std::vector<double>{want_total}, tol_for(t), "total", std::sqrt(40000.0));
      for (size_t i = 0; i < ps.size(); ++i) {
        if (int(i) == no_grad) {
          CHECK_FALSE(ps[i].second.grad().defined());  // skipped, not created
          continue;
        }
        std::vector<double> want = before[i];
        for (double& v : want) v *= coef;
        check_close(ps[i].second.grad(), want, tol_for(t), "clipped grad " + ps[i].first);
      }
      // The clipped gradients' norm: max_norm, but for the 1e-6 in the coef.
      check_close(std::vector<double>{direct_total(ps)}, std::vector<double>{coef * want_total}, tol_for(t),
                  "norm after");
    }
  }
}

TEST_CASE("clip_grad_norm below the threshold changes nothing") {
  for (DType t : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(t));
    nn::NamedTensors ps = make_params(t, 1.0);
    const double want_total = direct_total(ps);
    std::vector<std::vector<double>> before;
    for (const auto& [name, p] : ps) before.push_back(p.grad().to_vector<double>());
    for (double max_norm : {want_total * 10.0, want_total + 1e-3}) {
      const Tensor total = optim::clip_grad_norm(ps, max_norm);
      check_close(total, std::vector<double>{want_total}, tol_for(t), "total", std::sqrt(40000.0));
      // coef = max_norm / (total + 1e-6) > 1 is clamped to exactly 1: bit-identical gradients.
      for (size_t i = 0; i < ps.size(); ++i) CHECK(ps[i].second.grad().to_vector<double>() == before[i]);
    }
  }
}

TEST_CASE("clip_grad_norm: no gradients, zero gradients, errors") {
  nn::NamedTensors none = {{"a", Tensor::zeros({3}, DType::f64)}};
  const Tensor z = optim::clip_grad_norm(none, 1.0);
  CHECK(z.item() == 0.0);
  CHECK(z.dtype() == DType::f64);
  CHECK_FALSE(none[0].second.grad().defined());

  nn::NamedTensors zero = {{"a", Tensor::zeros({3}, DType::f32)}};
  zero[0].second.set_grad(Tensor::zeros({3}, DType::f32));
  CHECK(optim::clip_grad_norm(zero, 0.0).item() == 0.0);  // coef 0 / 1e-6 = 0: zeros stay zeros
  CHECK(zero[0].second.grad().to_vector<double>() == std::vector<double>{0, 0, 0});

  nn::NamedTensors mixed = {{"a", Tensor::zeros({2}, DType::f32)}, {"b", Tensor::zeros({2}, DType::f64)}};
  mixed[0].second.set_grad(Tensor::full({2}, 1.0, DType::f32));
  mixed[1].second.set_grad(Tensor::full({2}, 1.0, DType::f64));
  CHECK_THROWS_WITH_AS(optim::clip_grad_norm(mixed, 1.0),
                       doctest::Contains("the gradient of 'b' is f64 but that of 'a' is f32"), Error);
  CHECK(mixed[0].second.grad().to_vector<double>() == std::vector<double>{1, 1});  // nothing changed

  CHECK_THROWS_WITH_AS(optim::clip_grad_norm(zero, -1.0), doctest::Contains("clip_grad_norm: max_norm must be"),
                       Error);
  CHECK_THROWS_WITH_AS(optim::clip_grad_norm(zero, std::nan("")), doctest::Contains("max_norm must be"), Error);
}

}  // namespace
}  // namespace rt
