// The fused CUDA optimizers against the CPU optimizers (5 steps, bit-identical: see
// Note [Bit-exact updates on the GPU] in kernels/cuda/optim.cu) and the loss-scaling kernel
// against GradScaler's CPU path (GradScaler's rules: grad_scaler_cuda_test).
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cuda/loss_scale.h"
#include "kernels/cuda/optim.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;
using optim::GradScaler;
using optim::GradScalerOptions;

cudaStream_t stream() { return static_cast<cudaStream_t>(Stream::current(gpu()).handle()); }

// Bit-level equality of two tensors' values (NaN payloads included).
void check_identical(const Tensor& got, const Tensor& want, const std::string& what) {
  const Tensor g = got.to(Device::cpu()), w = want.to(Device::cpu());
  REQUIRE(g.dtype() == w.dtype());
  REQUIRE(g.numel() == w.numel());
  const size_t bytes = size_t(g.numel()) * dtype_size(g.dtype());
  int64_t differ = 0;
  if (g.dtype() == DType::f32) {
    const float *a = g.data<float>(), *b = w.data<float>();
    for (int64_t i = 0; i < g.numel(); ++i) differ += std::memcmp(a + i, b + i, 4) != 0;
  } else {
    differ = std::memcmp(g.raw_data(), w.raw_data(), bytes) != 0;
  }
  CHECK_MESSAGE(differ == 0, what, ": ", differ, " elements differ in their bits");
}

// Sizes: 28 tensors, 1-D ones (no_decay_1d), odd sizes and one of several chunks of the
// multi-tensor apply (kMtaChunk elements each) with a partial last chunk.
std::vector<Shape> param_shapes() {
  std::vector<Shape> s;
  for (int i = 0; i < 26; ++i) s.push_back(i % 3 == 0 ? Shape{int64_t(1 + 7 * i)} : Shape{int64_t(1 + i), 5});
  s.push_back({300001});
  s.push_back({64, 3, 3, 3});
  return s;
}

using Make = std::function<std::unique_ptr<optim::Optimizer>(nn::NamedTensors)>;

// device_lr: the GPU optimizer reads its learning rate from device memory
// (Note [The learning rate in device memory] in optim/optimizer.h), which changes every step,
// while its host lr is wrong: equality shows the kernels read the device value. With
// host_lr_too (AdamW: Note [AdamW's scalars in device memory] in optim/adamw.cc) the host lr is
// right and prepare_device_step writes the step's scalars before each step; the parameter
// without a gradient at step 3 differs from what was prepared, so step() writes its own.
void compare_five_steps(const Make& make, DType t, const std::string& what, bool device_lr = false,
                        bool host_lr_too = false) {
  nn::NamedTensors cpu_ps, gpu_ps;
  uint64_t seed = 1000;
  const std::vector<Shape> shapes = param_shapes();
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Tensor v = rnd(shapes[i], ++seed).to(t);
    cpu_ps.push_back({"p" + std::to_string(i), v.clone()});
    gpu_ps.push_back({"p" + std::to_string(i), v.to(gpu())});
  }
  auto cpu_opt = make(cpu_ps), gpu_opt = make(gpu_ps);
  const double lr0 = cpu_opt->lr();
  Tensor lr_dev;
  if (device_lr) {
    lr_dev = Tensor::zeros({1}, DType::f64, gpu());
    gpu_opt->set_device_lr(lr_dev);
  }
  for (int step = 0; step < 5; ++step) {
    if (device_lr) {
      const double lr = lr0 / (1.0 + step);  // the schedule changes it every step
      cpu_opt->set_lr(lr);
      lr_dev.fill_(lr);
      gpu_opt->set_lr(host_lr_too ? lr : 1e3);  // 1e3: not what the kernels read
      gpu_opt->prepare_device_step();
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (step == 2 && i == 3) {  // a parameter without a gradient is skipped on both
        cpu_ps[i].second.zero_grad();
        gpu_ps[i].second.zero_grad();
        continue;
      }
      const Tensor g = rnd(shapes[i], ++seed).to(t);
      cpu_ps[i].second.set_grad(g.clone());
      gpu_ps[i].second.set_grad(g.to(gpu()));
    }
    cpu_opt->step();
    gpu_opt->step();
  }
  for (size_t i = 0; i < shapes.size(); ++i)
    check_identical(gpu_ps[i].second, cpu_ps[i].second, what + " " + cpu_ps[i].first);
  const auto cs = cpu_opt->state(), gs = gpu_opt->state();
  REQUIRE(cs.size() == gs.size());
  for (const auto& [k, v] : cs) {
    REQUIRE(gs.count(k) == 1);
    if (v.dtype() == DType::f32 || v.dtype() == DType::f64) check_identical(gs.at(k), v, what + " state " + k);
  }
}

// By hand: optimizer state updated in place over steps, bit for bit.
TEST_CASE("fused SGD and AdamW on CUDA equal the CPU optimizers bit for bit over 5 steps") {
  if (!have_gpu("fused optimizers vs CPU")) return;
  optim::SgdOptions plain;
  plain.lr = 0.05;
  optim::SgdOptions mom;
  mom.lr = 0.1;
  mom.momentum = 0.9;
  mom.dampening = 0.1;
  mom.weight_decay = 1e-4;
  optim::SgdOptions nesterov;
  nesterov.lr = 0.1;
  nesterov.momentum = 0.9;
  nesterov.weight_decay = 5e-4;
  nesterov.nesterov = true;
  nesterov.no_decay_1d = true;
  optim::AdamWOptions adamw;
  adamw.lr = 1e-3;
  adamw.weight_decay = 0.05;
  adamw.no_decay_1d = true;
  for (DType t : {DType::f32, DType::f64}) {
    compare_five_steps([&](nn::NamedTensors p) { return optim::make_sgd(std::move(p), plain); }, t,
                       std::string("sgd ") + dtype_name(t));
    compare_five_steps([&](nn::NamedTensors p) { return optim::make_sgd(std::move(p), mom); }, t,
                       std::string("sgd momentum ") + dtype_name(t));
    compare_five_steps([&](nn::NamedTensors p) { return optim::make_sgd(std::move(p), nesterov); }, t,
                       std::string("sgd nesterov ") + dtype_name(t));
    compare_five_steps([&](nn::NamedTensors p) { return optim::make_adamw(std::move(p), adamw); }, t,
                       std::string("adamw ") + dtype_name(t));
  }
}

// By hand: optimizer state in place, scalars from device memory, bit for bit.
TEST_CASE("fused SGD and AdamW reading their step's scalars from device memory equal the CPU bit for bit") {
  // AdamW takes one too, and its per-step scalars with it (prepare_device_step).
  auto adamw = optim::make_adamw({{"w", Tensor::zeros({3})}}, optim::AdamWOptions{});
  CHECK(adamw->takes_device_lr());
  auto sgd = optim::make_sgd({{"w", Tensor::zeros({3})}}, optim::SgdOptions{});
  CHECK(sgd->takes_device_lr());
  CHECK_THROWS_WITH_AS(sgd->set_device_lr(Tensor::zeros({1}, DType::f64)),
                       doctest::Contains("one f64 value on a CUDA device"), Error);
  if (!have_gpu("SGD and AdamW with their scalars in device memory")) return;
  CHECK_THROWS_WITH_AS(sgd->set_device_lr(Tensor::zeros({2}, DType::f64, gpu())),
                       doctest::Contains("one f64 value on a CUDA device"), Error);
  optim::SgdOptions mom;
  mom.lr = 0.1;
  mom.momentum = 0.9;
  mom.weight_decay = 1e-4;
  mom.nesterov = true;
  for (DType t : {DType::f32, DType::f64})
    compare_five_steps([&](nn::NamedTensors p) { return optim::make_sgd(std::move(p), mom); }, t,
                       std::string("sgd device lr ") + dtype_name(t), true);
  optim::AdamWOptions aw;
  aw.lr = 1e-3;
  aw.weight_decay = 1e-2;
  aw.no_decay_1d = true;  // two scalar sets: decayed and not
  for (DType t : {DType::f32, DType::f64})
    compare_five_steps([&](nn::NamedTensors p) { return optim::make_adamw(std::move(p), aw); }, t,
                       std::string("adamw device scalars ") + dtype_name(t), true, true);
}

// More distinct per-tensor scalars than one launch carries (kMtaMaxGroups): the list is cut
// into several launches (Note [Multi-tensor apply]), with the same results.
// By hand: optimizer state updated in place over steps.
TEST_CASE("fused SGD and AdamW with more weight decays than one launch carries equal the CPU") {
  if (!have_gpu("fused optimizers, many scalar sets")) return;
  optim::SgdOptions sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  optim::AdamWOptions adamw;
  adamw.lr = 1e-3;
  for (int i = 0; i < 2 * cuda::kMtaMaxGroups + 3; ++i) {
    const double wd = 1e-4 * (i + 1);
    sgd.weight_decay_of["p" + std::to_string(i)] = wd;
    adamw.weight_decay_of["p" + std::to_string(i)] = wd;
  }
  compare_five_steps([&](nn::NamedTensors p) { return optim::make_sgd(std::move(p), sgd); }, DType::f32,
                     "sgd, 19 decays");
  compare_five_steps([&](nn::NamedTensors p) { return optim::make_adamw(std::move(p), adamw); }, DType::f32,
                     "adamw, 19 decays");
}

// By hand: upload counts of the table, and parameters updated in place.
TEST_CASE("multi-tensor table: uploaded once while the list stays, again when it changes") {
  if (!have_gpu("multi-tensor table reuse")) return;
  const int64_t n = 3 * cuda::kMtaChunk + 5;
  const Tensor grad = rnd({n}, 4).to(DType::f32);
  const Tensor g = grad.to(gpu());
  Tensor pa = rnd({n}, 1).to(DType::f32).to(gpu()), pb = rnd({n}, 2).to(DType::f32).to(gpu());
  Tensor pc = rnd({n}, 3).to(DType::f32).to(gpu());
  auto entry = [&](const Tensor& p) {
    cuda::SgdTensor e;
    e.p = p.raw_data();
    e.g = g.raw_data();
    e.n = n;
    return e;
  };
  cuda::MultiTensorTable table;
  const cuda::SgdHyper h{0.1, 0.0, 0.0, false};
  for (int step = 0; step < 3; ++step) cuda::sgd_update(DType::f32, {entry(pa), entry(pb)}, h, table, stream());
  CHECK(table.uploads() == 1);
  CHECK(table.chunks() == 2 * cuda::mta_chunks(n));
  cuda::sgd_update(DType::f32, {entry(pa), entry(pc)}, h, table, stream());  // another parameter
  CHECK(table.uploads() == 2);
  cuda::sgd_update(DType::f32, {entry(pa)}, h, table, stream());  // a shorter list
  CHECK(table.uploads() == 3);
  // The updates landed where each list pointed: pa took 5 steps, pb 3, pc 1.
  const int steps[3] = {5, 3, 1};
  const Tensor* ps[3] = {&pa, &pb, &pc};
  for (int k = 0; k < 3; ++k) {
    Tensor want = rnd({n}, uint64_t(k + 1)).to(DType::f32);
    for (int s = 0; s < steps[k]; ++s) want = add(want, mul(grad, -0.1));
    check_on_gpu(*ps[k], want, gpu_tol_for(DType::f32), "parameter " + std::to_string(k));
  }
}

// By hand: a launcher writing a second copy in place.
TEST_CASE("fused updates write the optional bf16 copy in the same pass") {
  if (!have_gpu("fused optimizers bf16 copy")) return;
  const int64_t n = 4099;
  Tensor p = rnd({n}, 1).to(DType::f32).to(gpu()), g = rnd({n}, 2).to(DType::f32).to(gpu());
  Tensor m = Tensor::zeros({n}, DType::f32, gpu()), v = Tensor::zeros({n}, DType::f32, gpu());
  Tensor low = poisoned({n}, DType::bf16);
  cuda::AdamWTensor e;
  e.p = p.raw_data();
  e.g = g.raw_data();
  e.exp_avg = m.raw_data();
  e.exp_avg_sq = v.raw_data();
  e.p_bf16 = low.raw_data();
  e.n = n;
  cuda::MultiTensorTable table;
  cuda::adamw_update(DType::f32, {e}, cuda::AdamWHyper{1e-3, 0.9, 0.999, 1e-8}, table, stream());
  check_identical(low, p.to(DType::bf16), "adamw bf16 copy");
  cuda::SgdTensor s;
  s.p = p.raw_data();
  s.g = g.raw_data();
  s.p_bf16 = low.raw_data();
  s.n = n;
  cuda::sgd_update(DType::f32, {s}, cuda::SgdHyper{0.1, 0.0, 0.0, false}, table, stream());
  check_identical(low, p.to(DType::bf16), "sgd bf16 copy");
}

TEST_CASE("fused update launchers: host-side checks (runs without a GPU)") {
  cuda::MultiTensorTable table;
  CHECK_THROWS_WITH_AS(cuda::sgd_update(DType::bf16, {}, {}, table, nullptr), doctest::Contains("f32 or f64"), Error);
  cuda::SgdTensor bad;
  bad.n = 4;
  CHECK_THROWS_WITH_AS(cuda::sgd_update(DType::f32, {bad}, {}, table, nullptr), doctest::Contains("null pointer"),
                       Error);
  cuda::AdamWTensor a;
  a.step = 0;
  CHECK_THROWS_WITH_AS(cuda::adamw_update(DType::f32, {a}, {}, table, nullptr), doctest::Contains("step must be >= 1"),
                       Error);
  float flag = 0.0f;
  CHECK_THROWS_WITH_AS(cuda::unscale_and_check(DType::f32, {nullptr}, {}, 1.0f, nullptr, &flag, table, nullptr),
                       doctest::Contains("1 gradients but 0 sizes"), Error);
  cuda::unscale_and_check(DType::f32, {}, {}, 0.5f, nullptr, &flag, table, nullptr);  // nothing: no launch
  cuda::SgdTensor empty;  // a list of empty tensors: no upload, no launch
  empty.n = 0;
  cuda::sgd_update(DType::f32, {empty, empty}, {}, table, nullptr);
  CHECK(table.uploads() == 0);
}

// ---- the unscale kernel vs the CPU -------------------------------------------------------

// By hand: gradients unscaled in place and the inf/nan flag, not an autograd op.
TEST_CASE("unscale_and_check on CUDA equals the CPU path, and flags inf/nan") {
  if (!have_gpu("unscale_and_check vs CPU")) return;
  for (DType t : {DType::f32, DType::f64}) {
    for (bool poison : {false, true}) {
      CAPTURE(dtype_name(t));
      CAPTURE(poison);
      nn::NamedTensors cpu_ps, gpu_ps;
      const std::vector<Shape> shapes = param_shapes();
      for (size_t i = 0; i < shapes.size(); ++i) {
        const Tensor v = rnd(shapes[i], 50 + i).to(t);
        cpu_ps.push_back({"p" + std::to_string(i), v.clone()});
        gpu_ps.push_back({"p" + std::to_string(i), v.to(gpu())});
        Tensor g = mul(rnd(shapes[i], 500 + i), 1000.0).to(t);
        if (poison && i == shapes.size() - 2) g = Tensor::full(shapes[i], std::nan(""), t);
        cpu_ps[i].second.set_grad(g.clone());
        gpu_ps[i].second.set_grad(g.to(gpu()));
      }
      auto cpu_opt = optim::make_sgd(cpu_ps, {}), gpu_opt = optim::make_sgd(gpu_ps, {});
      GradScaler cs, gs(GradScalerOptions{}, gpu());
      CHECK(cs.unscale(*cpu_opt) == poison);
      CHECK(gs.unscale(*gpu_opt) == poison);
      for (size_t i = 0; i < shapes.size(); ++i)
        check_identical(gpu_ps[i].second.grad(), cpu_ps[i].second.grad(), "unscaled grad " + cpu_ps[i].first);
    }
  }
  // 16-bit gradients through the launcher: float math, one rounding.
  for (DType t : {DType::bf16, DType::f16}) {
    const Tensor g64 = rnd({1000}, 9);
    Tensor g = to_gpu(g64, t);
    Tensor flag = Tensor::zeros({1}, DType::f32, gpu());
    cuda::MultiTensorTable table;
    cuda::unscale_and_check(t, {g.raw_data()}, {g.numel()}, 0.125f, nullptr, flag.data<float>(), table, stream());
    CHECK(flag.item() == 0.0);
    check_on_gpu(g, mul(to_ref(g64, t), 0.125), gpu_tol_for(t), std::string("unscale ") + dtype_name(t));
    Tensor bad = Tensor::full({5}, std::numeric_limits<double>::infinity(), t, gpu());
    cuda::unscale_and_check(t, {bad.raw_data()}, {bad.numel()}, 0.5f, nullptr, flag.data<float>(), table, stream());
    CHECK(flag.item() == 1.0);
  }
}

}  // namespace
}  // namespace rt
