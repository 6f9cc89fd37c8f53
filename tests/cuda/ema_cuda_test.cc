// The model EMA's fused CUDA launches (kernels/cuda/ema.cu) against its CPU loop
// (optim/ema.cc): bit-identical in f32, f64 and i64 (Note [EMA rounding] in optim/ema.h),
// over more tensors than one launch takes, odd sizes, a channels-last weight, 0-D counters,
// copies and averages through a warmup reset; and the launcher's host-side checks.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "kernels/cuda/ema.h"
#include "optim/ema.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

// Bit-level equality of two tensors' values, element by element.
void check_identical(const Tensor& got, const Tensor& want, const std::string& what) {
  const Tensor g = got.to(Device::cpu()).to(MemoryFormat::contiguous);
  const Tensor w = want.to(Device::cpu()).to(MemoryFormat::contiguous);
  REQUIRE(g.dtype() == w.dtype());
  REQUIRE(g.numel() == w.numel());
  const size_t size = dtype_size(g.dtype());
  const auto* a = static_cast<const unsigned char*>(g.raw_data());
  const auto* b = static_cast<const unsigned char*>(w.raw_data());
  int64_t differ = 0;
  for (int64_t i = 0; i < g.numel(); ++i) differ += std::memcmp(a + i * size, b + i * size, size) != 0;
  CHECK_MESSAGE(differ == 0, what, ": ", differ, " of ", g.numel(), " elements differ in their bits");
}

// 140 tensors (one launch of the multi-tensor apply), odd sizes, 0-D and 1-D ones, a
// channels-last conv weight, and one of several chunks (kMtaChunk elements each) with a
// partial last chunk (70001 elements under the emulator, where every element is checked).
struct Spec {
  Shape shape;
  DType dtype;
  MemoryFormat format = MemoryFormat::contiguous;
};
std::vector<Spec> specs(DType t) {
  std::vector<Spec> s;
  for (int i = 0; i < 140; ++i)
    s.push_back({i % 3 == 0 ? Shape{int64_t(1 + 7 * i)} : Shape{int64_t(1 + i % 17), 5}, t});
  s.push_back({{}, t});
  s.push_back({{64, 3, 3, 3}, t, MemoryFormat::channels_last});
  s.push_back({{0}, t});
  for (int i = 0; i < 3; ++i) s.push_back({{}, DType::i64});  // num_batches_tracked
  s.push_back({{kEmulatedGpu ? int64_t(70001) : int64_t(300001)}, t});
  return s;
}

// The model's values at update k, in the tensor's dtype (counters near 2^24, where f32 is
// inexact).
Tensor value(const Spec& s, int k, uint64_t seed) {
  if (s.dtype == DType::i64) return Tensor::full(s.shape, double((1 << 24) - 5 + 3 * k + int(seed % 7)), DType::i64);
  const Tensor v = rnd(s.shape, seed + 1000 * uint64_t(k)).to(s.dtype);
  return s.shape.size() == 4 ? v.to(s.format) : v;
}

void compare(DType t) {
  const std::vector<Spec> sp = specs(t);
  nn::NamedTensors cpu_model, cpu_ema, gpu_model, gpu_ema;
  for (size_t i = 0; i < sp.size(); ++i) {
    const std::string name = "t" + std::to_string(i);
    const Tensor v = value(sp[i], 0, i);
    cpu_model.emplace_back(name, v.clone());
    cpu_ema.emplace_back(name, v.clone());
    gpu_model.emplace_back(name, v.to(gpu()));
    gpu_ema.emplace_back(name, v.to(gpu()));
  }
  optim::ModelEmaOptions o;
  o.decay = optim::ema_decay_for(0.99, 2, 16, 2, 7);
  o.steps = 2;
  o.warmup_epochs = 1;
  optim::ModelEma on_cpu(cpu_model, cpu_ema, o), on_gpu(gpu_model, gpu_ema, o);
  int k = 0;
  for (int64_t epoch = 0; epoch < 2; ++epoch)
    for (int64_t i = 0; i < 5; ++i) {
      ++k;
      for (size_t j = 0; j < sp.size(); ++j) {
        const Tensor v = value(sp[j], k, j);
        cpu_model[j].second.copy_(v);
        gpu_model[j].second.copy_(v);
      }
      CHECK(on_cpu.after_optimizer_step(epoch, i) == on_gpu.after_optimizer_step(epoch, i));
      CHECK(on_cpu.n_averaged() == on_gpu.n_averaged());
    }
  REQUIRE(on_gpu.n_averaged() == 3);  // averaged twice after the warmup's copies
  for (size_t j = 0; j < sp.size(); ++j) {
    const std::string what = std::string(dtype_name(t)) + " " + cpu_ema[j].first + " " + gpu_ema[j].second.str();
    CHECK_MESSAGE(gpu_ema[j].second.device() == gpu(), what);
    check_identical(gpu_ema[j].second, cpu_ema[j].second, what);
  }
  // The checkpoint of the GPU EMA resumes the CPU one.
  optim::ModelEma again(cpu_model, cpu_ema, o);
  again.load_state(on_gpu.state());
  CHECK(again.n_averaged() == 3);
  for (size_t j = 0; j < sp.size(); ++j)
    check_identical(cpu_ema[j].second, gpu_ema[j].second, "loaded " + cpu_ema[j].first);
}

// By hand: state updated in place over steps, bit for bit.
TEST_CASE("model EMA on CUDA equals the CPU loop bit for bit (f32, f64, i64 counters)") {
  if (!have_gpu("model EMA vs CPU")) return;
  compare(DType::f32);
  compare(DType::f64);
}

TEST_CASE("ema_update launcher: host-side checks (runs without a GPU)") {
  cuda::MultiTensorTable table;
  CHECK_THROWS_WITH_AS(cuda::ema_update(DType::bf16, {}, 0.9, false, table, nullptr),
                       doctest::Contains("f32, f64 or i64"), Error);
  cuda::EmaTensor bad;
  bad.n = 4;
  CHECK_THROWS_WITH_AS(cuda::ema_update(DType::f32, {bad}, 0.9, false, table, nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(cuda::ema_update(DType::f32, {}, std::nan(""), false, table, nullptr),
                       doctest::Contains("decay must be finite"), Error);
  cuda::ema_update(DType::f64, {cuda::EmaTensor{}}, 0.5, true, table, nullptr);  // nothing: no launch
}

}  // namespace
}  // namespace rt
