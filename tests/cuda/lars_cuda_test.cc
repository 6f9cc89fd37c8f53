// LARS and clip_grad_norm on CUDA against the CPU (f32, f64): many tensors of odd sizes, more
// (one launch of the multi-tensor apply each for the norms and the update), zero norms,
// skipped parameters. The norms are summed in another order than the CPU's, so the results
// match at gpu_tol_for, not bit for bit (Note [Deterministic norms] in kernels/cuda/grad_norm.cu);
// two GPU runs, though, match bit for bit.
#include <cstring>
#include <functional>
#include <string>

#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cuda/grad_norm.h"
#include "kernels/cuda/optim.h"
#include "optim/clip_grad.h"
#include "optim/optimizer.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

// 50 parameters: 100 norms (two launches of the norm kernel), three update launches; 1-D
// ones (excluded), sizes 1, 7, 1000, 4097 and one past a full grid stride of 1024 x 256.
std::vector<Shape> param_shapes() {
  std::vector<Shape> s = {{1}, {7}, {1000}, {4097}, {3, 3}, {64, 3, 3, 3}, {7, 1}, {1, 1}};
  for (int i = 0; s.size() < 49; ++i) s.push_back(i % 4 == 0 ? Shape{int64_t(1 + 13 * i)} : Shape{int64_t(1 + i), 3});
  s.push_back({kEmulatedGpu ? 70001 : 300001});  // the emulation leaves out the largest size
  return s;
}
constexpr size_t kZeroParam = 4;  // all zeros at the start: ||w|| = 0 (trust ratio 1)
constexpr size_t kZeroGrad = 5;   // zero gradients: ||g|| = 0 (trust ratio 1)
constexpr size_t kSkipped = 6;    // no gradient on step 2

struct Run {
  nn::NamedTensors cpu, gpu;
};

// The same parameters on the CPU and on the GPU.
Run make_run(DType t) {
  Run r;
  const std::vector<Shape> shapes = param_shapes();
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Tensor v = i == kZeroParam ? Tensor::zeros(shapes[i], t) : rnd(shapes[i], 100 + i).to(t);
    r.cpu.push_back({"p" + std::to_string(i), v.clone()});
    r.gpu.push_back({"p" + std::to_string(i), v.to(gpu())});
  }
  return r;
}

void give_grads(Run& r, DType t, uint64_t seed, double scale = 1.0) {
  for (size_t i = 0; i < r.cpu.size(); ++i) {
    const Shape& s = r.cpu[i].second.shape();
    const Tensor g = i == kZeroGrad ? Tensor::zeros(s, t) : mul(rnd(s, seed + i), scale).to(t);
    r.cpu[i].second.set_grad(g.clone());
    r.gpu[i].second.set_grad(g.to(gpu()));
  }
}

void compare_lars(const optim::LarsOptions& o, DType t, const std::string& what) {
  Run r = make_run(t);
  auto cpu_opt = optim::make_lars(r.cpu, o), gpu_opt = optim::make_lars(r.gpu, o);
  for (int step = 0; step < 5; ++step) {
    const double lr = 0.4 / (1.0 + step);  // the schedule changes the lr every step
    cpu_opt->set_lr(lr);
    gpu_opt->set_lr(lr);
    give_grads(r, t, 1000 * uint64_t(step + 1));
    if (step == 2) {
      r.cpu[kSkipped].second.zero_grad();
      r.gpu[kSkipped].second.zero_grad();
    }
    cpu_opt->step();
    gpu_opt->step();
  }
  for (size_t i = 0; i < r.cpu.size(); ++i)
    check_on_gpu(r.gpu[i].second, r.cpu[i].second, gpu_tol_for(t), what + " " + r.cpu[i].first);
  const auto cs = cpu_opt->state(), gs = gpu_opt->state();
  REQUIRE(cs.size() == gs.size());
  for (const auto& [k, v] : cs) {
    REQUIRE(gs.count(k) == 1);
    check_on_gpu(gs.at(k), v, gpu_tol_for(t), what + " state " + k);
  }
}

// By hand: optimizer state updated in place over steps.
TEST_CASE("LARS on CUDA equals the CPU over 5 steps with a changing lr (f32, f64)") {
  if (!have_gpu("LARS vs CPU")) return;
  optim::LarsOptions mlperf;
  optim::LarsOptions nesterov;
  nesterov.momentum = 0.8;
  nesterov.weight_decay = 1e-2;
  nesterov.eta = 0.05;
  nesterov.epsilon = 1e-3;
  nesterov.nesterov = true;
  nesterov.exclude_bn_bias = false;
  for (DType t : {DType::f32, DType::f64}) {
    compare_lars(mlperf, t, std::string("lars mlperf ") + dtype_name(t));
    compare_lars(nesterov, t, std::string("lars nesterov ") + dtype_name(t));
  }
}

// By hand: two GPU runs, bit for bit.
TEST_CASE("LARS on CUDA reading its learning rate from device memory equals it as an argument, bit for bit") {
  if (!have_gpu("LARS with its lr in device memory")) return;
  for (DType t : {DType::f32, DType::f64}) {
    Run a = make_run(t), b = make_run(t);
    optim::LarsOptions o;
    auto arg = optim::make_lars(a.gpu, o), dev = optim::make_lars(b.gpu, o);
    CHECK(dev->takes_device_lr());
    Tensor lr_dev = Tensor::zeros({1}, DType::f64, gpu());
    dev->set_device_lr(lr_dev);
    for (int step = 0; step < 4; ++step) {
      const double lr = 0.4 / (1.0 + step);
      arg->set_lr(lr);
      lr_dev.fill_(lr);
      dev->set_lr(1e3);  // not what the kernels read
      give_grads(a, t, 500 * uint64_t(step + 1));
      give_grads(b, t, 500 * uint64_t(step + 1));
      arg->step();
      dev->step();
    }
    for (size_t i = 0; i < a.gpu.size(); ++i)
      check_on_gpu(b.gpu[i].second, a.gpu[i].second.to(Device::cpu()), kExact,
                   std::string("lars device lr ") + dtype_name(t) + " " + a.gpu[i].first);
  }
}

// By hand: determinism, two GPU runs bit for bit.
TEST_CASE("LARS on CUDA is deterministic: two runs agree bit for bit") {
  if (!have_gpu("LARS determinism")) return;
  Run a = make_run(DType::f32), b = make_run(DType::f32);
  optim::LarsOptions o;
  o.eta = 0.05;
  auto oa = optim::make_lars(a.gpu, o), ob = optim::make_lars(b.gpu, o);
  for (int step = 0; step < 2; ++step) {
    give_grads(a, DType::f32, 77 + step);
    give_grads(b, DType::f32, 77 + step);
    oa->step();
    ob->step();
  }
  for (size_t i = 0; i < a.gpu.size(); ++i) check_on_gpu(a.gpu[i].second, b.gpu[i].second.to(Device::cpu()), kExact,
                                                         "run to run " + a.gpu[i].first);
}

// By hand: gradients scaled in place and the total norm returned, not an autograd op.
TEST_CASE("clip_grad_norm on CUDA equals the CPU (f32, f64), above and below the threshold") {
  if (!have_gpu("clip_grad_norm vs CPU")) return;
  for (DType t : {DType::f32, DType::f64}) {
    for (double max_norm : {1.0, 1e6}) {
      const std::string what = std::string("clip ") + dtype_name(t) + " max_norm " + std::to_string(max_norm);
      Run r = make_run(t);
      give_grads(r, t, 5, 3.0);
      r.cpu[kSkipped].second.zero_grad();  // skipped on both
      r.gpu[kSkipped].second.zero_grad();
      // 100 gradients: more than one launch of the norm and scale kernels (96 each).
      for (int i = 0; i < 50; ++i) {
        const Tensor w = rnd({int64_t(3 + i)}, 900 + i).to(t);
        r.cpu.push_back({"extra" + std::to_string(i), w.clone()});
        r.gpu.push_back({"extra" + std::to_string(i), w.to(gpu())});
        const Tensor g = rnd({int64_t(3 + i)}, 950 + i).to(t);
        r.cpu.back().second.set_grad(g.clone());
        r.gpu.back().second.set_grad(g.to(gpu()));
      }
      const Tensor want = optim::clip_grad_norm(r.cpu, max_norm);
      const Tensor got = optim::clip_grad_norm(r.gpu, max_norm);
      CHECK(got.ndim() == 0);
      CHECK(got.dtype() == t);
      // A sum over every gradient element: atol scaled by sqrt(terms) (Note [Tolerances]).
      check_on_gpu(got, want, gpu_tol_for(t), what + " total", std::sqrt(double(param_shapes().back()[0])));
      for (size_t i = 0; i < r.cpu.size(); ++i)
        check_on_gpu(r.gpu[i].second.grad(), r.cpu[i].second.grad(), gpu_tol_for(t), what + " " + r.cpu[i].first);
    }
  }
}

TEST_CASE("norm kernels: host-side checks (runs without a GPU)") {
  cuda::MultiTensorTable table;
  CHECK_THROWS_WITH_AS(cuda::sum_squares_partials(DType::bf16, {}, {}, table, nullptr, nullptr),
                       doctest::Contains("f32 or f64"), Error);
  CHECK_THROWS_WITH_AS(cuda::sum_squares_partials(DType::f32, {nullptr}, {}, table, nullptr, nullptr),
                       doctest::Contains("1 tensors but 0 sizes"), Error);
  double coef = 0.0;
  CHECK_THROWS_WITH_AS(cuda::clip_grad_coef(DType::f32, table, nullptr, 1.0, nullptr, &coef, nullptr),
                       doctest::Contains("null pointer"), Error);
  cuda::LarsTensor bad;
  bad.n = 3;
  CHECK(cuda::lars_partials({bad}) == 2);
  float partials[2] = {};
  cuda::LarsTables tables;
  CHECK_THROWS_WITH_AS(cuda::lars_update(DType::f32, {bad}, {}, tables, partials, nullptr),
                       doctest::Contains("null pointer"), Error);
  cuda::lars_update(DType::f32, {}, {}, tables, nullptr, nullptr);  // nothing: no launch
}

}  // namespace
}  // namespace rt
