// LARS (MLPerf ResNet50's rule, optim/optimizer.h) against a reference written here as plain
// loops over std::vector<double>: several steps with a changing lr, excluded and adapted
// parameters, zero norms, nesterov; f32 against the f64 reference; exact resume from
// state(); option errors.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "optim/optimizer.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using optim::LarsOptions;
using test::check_close;
using test::rnd;
using test::tol_for;

// ---- the reference: the rule, written independently -------------------------------------

struct RefParam {
  std::vector<double> w, v;  // parameter and momentum buffer (zeros at the start)
  bool excluded = false;     // ndim <= 1 with exclude_bn_bias
};

double norm(const std::vector<double>& x) {
  double s = 0.0;
  for (double e : x) s += e * e;
  return std::sqrt(s);
}

void ref_step(RefParam& p, const std::vector<double>& g, double lr, const LarsOptions& o) {
  double scaled_lr = lr, wd = 0.0;
  if (!p.excluded) {
    wd = o.weight_decay;
    const double wn = norm(p.w), gn = norm(g);
    const double trust = wn > 0.0 && gn > 0.0 ? o.eta * wn / (gn + wd * wn + o.epsilon) : 1.0;
    scaled_lr = lr * trust;
  }
  for (size_t i = 0; i < p.w.size(); ++i) {
    const double step = scaled_lr * (g[i] + wd * p.w[i]);
    p.v[i] = o.momentum * p.v[i] + step;
    p.w[i] -= o.nesterov ? o.momentum * p.v[i] + step : p.v[i];
  }
}

// ---- the parameters: adapted ones, 1-D ones, a zero one and one with zero gradients --------

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {{4, 3}, {5}, {2, 3, 2, 2}, {3, 2}, {7}, {6, 1}, {1}};
  return s;
}
constexpr size_t kZeroParam = 3;  // starts at zero: ||w|| = 0 on its first step (trust ratio 1)
constexpr size_t kZeroGrad = 5;   // its gradients are zero: ||g|| = 0 (trust ratio 1)
constexpr size_t kSkipped = 4;    // no gradient on step 2: skipped
constexpr int kSteps = 6;

double lr_at(int step) { return 0.5 * (1.0 + step) / (1.0 + 0.3 * step * step); }  // changes every step

Tensor grad_at(size_t i, int step) {
  if (i == kZeroGrad) return Tensor::zeros(shapes()[i], DType::f64);
  return rnd(shapes()[i], 1000 + 100 * uint64_t(step) + i);
}

// Runs kSteps LARS steps in dtype t and the reference, and compares every parameter and
// momentum buffer with the reference at t's tolerance.
void check_against_reference(const LarsOptions& o, DType t, const std::string& what) {
  nn::NamedTensors ps;
  std::vector<RefParam> ref;
  for (size_t i = 0; i < shapes().size(); ++i) {
    const Tensor w0 = i == kZeroParam ? Tensor::zeros(shapes()[i], DType::f64) : rnd(shapes()[i], 10 + i).to(t);
    ps.push_back({"p" + std::to_string(i), w0.to(t).clone()});
    RefParam r;
    r.w = w0.to_vector<double>();  // the rounded values the dtype sees
    r.v.assign(r.w.size(), 0.0);
    r.excluded = o.exclude_bn_bias && shapes()[i].size() <= 1;
    ref.push_back(r);
  }
  auto opt = optim::make_lars(ps, o);
  for (int step = 0; step < kSteps; ++step) {
    opt->set_lr(lr_at(step));
    for (size_t i = 0; i < ps.size(); ++i) {
      if (step == 2 && i == kSkipped) {
        ps[i].second.zero_grad();
        continue;
      }
      const Tensor g = grad_at(i, step).to(t);
      ps[i].second.set_grad(g.clone());
      ref_step(ref[i], g.to_vector<double>(), lr_at(step), o);
    }
    opt->step();
  }
  const auto state = opt->state();
  for (size_t i = 0; i < ps.size(); ++i) {
    check_close(ps[i].second, ref[i].w, tol_for(t), what + " " + ps[i].first);
    const std::string key = "momentum_buffer." + ps[i].first;
    REQUIRE_MESSAGE(state.count(key) == 1, what, ": no ", key);
    check_close(state.at(key), ref[i].v, tol_for(t), what + " " + key);
  }
}

LarsOptions mlperf(double weight_decay = 5e-5) {
  LarsOptions o;
  o.weight_decay = weight_decay;
  return o;
}

LarsOptions nesterov_all() {
  LarsOptions o;
  o.momentum = 0.8;
  o.weight_decay = 1e-2;
  o.eta = 0.05;
  o.epsilon = 1e-3;
  o.nesterov = true;
  o.exclude_bn_bias = false;  // the 1-D parameters get the trust ratio and decay too
  return o;
}

TEST_CASE("LARS equals the reference rule over 6 steps with a changing lr (f64, f32)") {
  for (DType t : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(t));
    check_against_reference(mlperf(), t, std::string("mlperf ") + dtype_name(t));
    check_against_reference(mlperf(0.1), t, std::string("strong decay ") + dtype_name(t));
    check_against_reference(nesterov_all(), t, std::string("nesterov, nothing excluded ") + dtype_name(t));
    LarsOptions no_momentum = mlperf();
    no_momentum.momentum = 0.0;
    check_against_reference(no_momentum, t, std::string("momentum 0 ") + dtype_name(t));
  }
}

TEST_CASE("LARS: the trust ratio on a hand-computed step") {
  // w = (3, 4): ||w|| = 5; g = (0, 2): ||g|| = 2; eta 0.1, wd 0.5:
  // trust = 0.1 * 5 / (2 + 0.5 * 5) = 1/9; scaled_lr = 0.9 / 9 = 0.1;
  // v = 0.1 * (g + 0.5 w) = (0.15, 0.4); w = (2.85, 3.6). The bias (1-D) gets v = 0.9 * g.
  nn::NamedTensors ps = {{"w", Tensor::from_vector<double>({3.0, 4.0}, {1, 2})},
                         {"b", Tensor::from_vector<double>({1.0}, {1})}};
  LarsOptions o;
  o.lr = 0.9;
  o.eta = 0.1;
  o.weight_decay = 0.5;
  auto opt = optim::make_lars(ps, o);
  ps[0].second.set_grad(Tensor::from_vector<double>({0.0, 2.0}, {1, 2}));
  ps[1].second.set_grad(Tensor::from_vector<double>({2.0}, {1}));
  opt->step();
  check_close(ps[0].second, std::vector<double>{2.85, 3.6}, tol_for(DType::f64), "w");
  check_close(ps[1].second, std::vector<double>{1.0 - 1.8}, tol_for(DType::f64), "b");
}

TEST_CASE("LARS: state() / load_state() resumes bit for bit") {
  for (DType t : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(t));
    nn::NamedTensors a;
    for (size_t i = 0; i < shapes().size(); ++i) a.push_back({"p" + std::to_string(i), rnd(shapes()[i], 70 + i).to(t)});
    const LarsOptions o = nesterov_all();
    auto run = [&](nn::NamedTensors& ps, optim::Optimizer& opt, int from, int to) {
      for (int step = from; step < to; ++step) {
        opt.set_lr(lr_at(step));
        for (size_t i = 0; i < ps.size(); ++i) ps[i].second.set_grad(grad_at(i, step).to(t));
        opt.step();
      }
    };
    auto opt_a = optim::make_lars(a, o);
    run(a, *opt_a, 0, 3);
    // Resume from a snapshot into fresh tensors and a fresh optimizer.
    nn::NamedTensors b;
    for (const auto& [name, p] : a) b.push_back({name, p.clone()});
    auto opt_b = optim::make_lars(b, o);
    const auto saved = opt_a->state();
    CHECK(saved.size() == shapes().size());
    opt_b->load_state(saved);
    run(a, *opt_a, 3, 6);
    run(b, *opt_b, 3, 6);
    for (size_t i = 0; i < a.size(); ++i)
      CHECK_MESSAGE(a[i].second.to_vector<double>() == b[i].second.to_vector<double>(), a[i].first, " differs");
    // A state of another optimizer or model is refused, naming the entry.
    CHECK_THROWS_WITH_AS(opt_b->load_state({{"velocity.p0", Tensor::zeros({4, 3}, t)}}),
                         doctest::Contains("expected keys momentum_buffer.<param>"), Error);
    CHECK_THROWS_WITH_AS(opt_b->load_state({{"momentum_buffer.p0", Tensor::zeros({3, 4}, t)}}),
                         doctest::Contains("has shape"), Error);
  }
}

TEST_CASE("LARS: option and parameter errors name the culprit") {
  auto make = [](const LarsOptions& o) {
    nn::NamedTensors ps = {{"w", Tensor::zeros({2, 2}, DType::f32)}};
    return optim::make_lars(ps, o);
  };
  auto bad = [&](auto set, const char* name) {
    LarsOptions o;
    set(o);
    CHECK_THROWS_WITH_AS(make(o), doctest::Contains((std::string("LARS: ") + name + " must be").c_str()), Error);
  };
  bad([](LarsOptions& o) { o.eta = -0.001; }, "eta");
  bad([](LarsOptions& o) { o.epsilon = -1.0; }, "epsilon");
  bad([](LarsOptions& o) { o.lr = -0.1; }, "lr");
  bad([](LarsOptions& o) { o.momentum = std::nan(""); }, "momentum");
  bad([](LarsOptions& o) { o.weight_decay = -5e-5; }, "weight_decay");
  bad([](LarsOptions& o) { o.eta = INFINITY; }, "eta");
  CHECK_THROWS_WITH_AS(optim::make_lars({}, LarsOptions{}), doctest::Contains("LARS: got an empty parameter list"),
                       Error);
  nn::NamedTensors ps = {{"w", Tensor::zeros({2}, DType::f32)}};
  auto opt = optim::make_lars(ps, LarsOptions{});
  ps[0].second.set_grad(Tensor::zeros({2}, DType::f64));
  CHECK_THROWS_WITH_AS(opt->step(), doctest::Contains("LARS: the gradient of 'w' is f64"), Error);
  opt->set_lr(-1.0);
  ps[0].second.set_grad(Tensor::zeros({2}, DType::f32));
  CHECK_THROWS_WITH_AS(opt->step(), doctest::Contains("LARS: lr must be"), Error);
}

}  // namespace
}  // namespace rt
