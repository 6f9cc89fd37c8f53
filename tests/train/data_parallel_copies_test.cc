// Data parallel with compute copies (Note [Data parallel with compute copies] in
// train/data_parallel.cc), on the CPU with f64 masters and f32 compute, the same code path as
// bf16/fp16 copies of f32 masters on a GPU: 2 real processes (Gloo), DataParallel driven
// through the step's phases. The masters' gradients after the reduction must equal, bit for
// bit, the average of both ranks' gradients computed alone in one process (two ranks: each
// element is (a + b) / 2 exactly), for one micro-batch and for an accumulation of two; and
// every bucket is all-reduced once per optimizer step.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "distributed/launch_env.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "tests/distributed/launch.h"
#include "train/data_parallel.h"
#include "train/precision.h"
#include "tests/models/tiny_resnet.h"

namespace rt {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<nn::Module> tiny_model() {  // a width-4 ResNet18 for 1x8x8 images, f64 masters
  auto m = test::tiny_resnet18({.seed = 7});
  m->to(DType::f64);
  m->to(Device::cpu(), MemoryFormat::channels_last);
  return m;
}

// Rank r's micro-batch m: 8 images.
std::pair<Tensor, Tensor> batch(int rank, int micro) {
  Generator g(100 + uint64_t(rank) * 10 + uint64_t(micro));
  return {randn({8, 1, 8, 8}, g).to(MemoryFormat::channels_last), randint({8}, g, 0, 4)};
}

train::MixedPrecisionOptions f32_compute() {
  train::MixedPrecisionOptions o;
  o.compute = DType::f32;
  return o;
}

// The masters' gradients of `micro` micro-batches of every rank, averaged over 2 ranks, in one
// process: what the reduction must give.
std::vector<std::vector<double>> reference(int micro) {
  auto m = tiny_model();
  train::MixedPrecision mp(*m, f32_compute());
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < micro; ++k) {
      const auto [x, y] = batch(r, k);
      mp.backward(cross_entropy(mp.forward(x), y));
    }
  std::vector<std::vector<double>> g;
  for (const auto& [name, p] : m->named_parameters()) {
    std::vector<double> v = p.grad().contiguous().to_vector<double>();
    for (double& e : v) e = e * 0.5;
    g.push_back(v);
  }
  return g;
}

int rank_body(int) {
  const dist::LaunchEnv env = dist::launch_env_from_process();
  train::ParallelConfig cfg;
  cfg.timeout_s = 20;
  cfg.bucket_cap_mb = 0.01;  // several buckets
  train::DataParallel par(env, Device::cpu(), cfg);
  auto m = tiny_model();
  train::MixedPrecision mp(*m, f32_compute());
  REQUIRE(mp.compute_copies() != nullptr);
  par.attach(*m, mp.compute_copies(), "");
  for (int micro : {1, 2}) {
    for (int k = 0; k < micro; ++k) {
      const bool last = k == micro - 1;
      const auto [x, y] = batch(env.rank, k);
      par.before_backward(last);
      mp.backward(cross_entropy(mp.forward(x), y));
      par.after_backward(last);
    }
    par.before_optimizer_step();
    const std::vector<std::vector<double>> want = reference(micro);
    size_t i = 0;
    for (const auto& [name, p] : m->named_parameters()) {
      RT_CHECK(p.grad().defined(), name, ": no gradient");
      RT_CHECK(p.grad().contiguous().to_vector<double>() == want[i], "rank ", env.rank, ", ", micro,
               " micro-batch(es): ", name, "'s reduced gradient differs from the average of both ranks'");
      ++i;
    }
    for (const auto& [name, p] : m->named_parameters()) Tensor(p).zero_grad();
  }
  par.finish();
  return 0;
}

TEST_CASE("data parallel with f32 compute copies of f64 masters: the masters' gradients are averaged exactly") {
  dist::testing::LaunchOptions o;
  o.limit = 60s;
  const auto r = dist::testing::launch(2, rank_body, o);
  INFO(r.report());
  CHECK(r.ok());
}

}  // namespace
}  // namespace rt
