// Training with the fused block tails equals training without them: one forward, loss and
// backward of a bottleneck ResNet (every tail kind: relu after a batch norm, the identity
// add, the downsample add) built with ResNetConfig::fused_tails on and off from the same
// weights and batch, then one SGD step; on the CPU in f64 and f32, and on CUDA (both
// layouts, f32) with the residual gradients added in place by the convolutions
// (Note [Gradients accumulated in place] in engine/autograd.h) against the unfused
// composition with out-of-place sums.
//
// Tolerances: on the CPU the fused pass computes what the composition does, operation by
// operation in the storage dtype ((x - mean) * scale + shift, rounded, then + residual,
// rounded, then the relu: kernels/cpu/batch_norm.cc), so f64 and f32 are equal bit for bit.
// On CUDA the tails are the same arithmetic in f32 too, but the convolutions' in-place sums
// round once (cuDNN adds the earlier gradient before rounding) where the out-of-place sum
// rounds twice: the fused-versus-unfused difference of every gradient and updated parameter
// is judged against f32's own error against f64 on the same quantity (the yardstick, the
// CPU's f32 run against its f64 run; docs/numerics.md), within kYardstickEngines (10x) as the
// whole-model CUDA tests allow cuDNN's engines, plus kYardstickFloor for quantities f32 gets
// almost exact (rows of Note [Tolerances] in tests/test_util.h). One step from the same state is well conditioned; a
// pre-activation within f32 rounding of a relu's kink would decide a mask differently and show as an O(1) error in some
// gradient (none does in this case: docs/numerics.md's kink-free condition, checked by the bound itself).
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "kernels/cuda/conv2d.h"
#include "models/resnet.h"
#include "optim/optimizer.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;
using TensorMap = std::map<std::string, Tensor>;

constexpr int64_t kBatch = 4, kClasses = 5, kSize = 32;

std::shared_ptr<models::ResNet> make_net(bool fused, bool conv_sums, bool bn_prologue, bool dual_tails) {
  models::ResNetConfig c;
  c.bottleneck = true;
  c.layers = {2, 1, 1, 1};  // layer1.1: an identity tail; every first block a downsample tail
  c.num_classes = kClasses;
  c.width = 8;
  c.seed = 7;
  c.fused_tails = fused;
  c.conv_sums = conv_sums;
  c.bn_prologue = bn_prologue;
  c.dual_tails = dual_tails;
  return std::make_shared<models::ResNet>(c);
}

struct Result {
  double loss = 0;
  TensorMap grads, after;  // f64 on the host: every parameter's gradient, the state after the step
};

Tensor host_f64(const Tensor& t) { return t.to(Device::cpu()).to(MemoryFormat::contiguous).to(DType::f64); }

Result run(bool fused, Device d, DType t, MemoryFormat f, bool conv_sums = true, bool bn_prologue = true,
           bool dual_tails = true) {
  set_accumulate_in_place(fused);
  auto net = make_net(fused, conv_sums, bn_prologue, dual_tails);
  if (t != DType::f32) net->to(t);
  net->to(d, f);
  net->train();
  Generator g(11);
  const Tensor x = randn({kBatch, 3, kSize, kSize}, g, DType::f32).to(t).to(f).to(d);
  const Tensor y = randint({kBatch}, g, 0, kClasses).to(d);
  optim::SgdOptions so;
  so.lr = 0.1;
  so.momentum = 0.9;
  so.weight_decay = 1e-2;
  auto opt = optim::make_sgd(net->named_parameters(), so);
  opt->zero_grad();
  const Tensor loss = cross_entropy(net->forward(x), y);
  Result r;
  r.loss = loss.item();
  loss.backward();
  for (const auto& [name, p] : net->named_parameters()) r.grads[name] = host_f64(p.grad());
  opt->step();
  for (const auto& [name, v] : net->state_dict())
    if (is_floating(v.dtype())) r.after[name] = host_f64(v);
  set_accumulate_in_place(true);
  return r;
}

double rel(const Tensor& a, const Tensor& b) {
  const double den = std::sqrt(sum(mul(b, b)).item());
  const Tensor d = sub(a, b);
  const double num = std::sqrt(sum(mul(d, d)).item());
  return den > 0 ? num / den : num;
}

// Every quantity of `got` against `want` within factor x its yardstick (`f32` against `f64`) + kYardstickFloor.
void check_within(const TensorMap& got, const TensorMap& want, const TensorMap& f32, const TensorMap& f64,
                  double factor, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, w] : want) {
    const double err = rel(got.at(name), w), yard = rel(f32.at(name), f64.at(name));
    const double bound = factor * yard + test::kYardstickFloor;
    CHECK_MESSAGE(err <= bound, what, " ", name, ": fused vs unfused ", err, " > ", bound, " (f32 vs f64 ", yard,
                  ")");
    if (err / bound > worst) worst = err / bound, worst_name = name;
  }
  std::printf("resnet fusion %s: worst %s at %.2f of its bound\n", what.c_str(), worst_name.c_str(), worst);
}

TEST_CASE("fused block tails equal the unfused composition on the CPU bit for bit, f64 and f32") {
  for (DType t : {DType::f64, DType::f32}) {
    const Result a = run(true, Device::cpu(), t, MemoryFormat::contiguous);
    const Result b = run(false, Device::cpu(), t, MemoryFormat::contiguous);
    const std::string tag = dtype_name(t);
    CHECK_MESSAGE(a.loss == b.loss, tag);
    for (const auto& [name, g] : b.grads)
      CHECK_MESSAGE(a.grads.at(name).to_vector<double>() == g.to_vector<double>(), tag, " gradient of ", name);
    for (const auto& [name, v] : b.after)
      CHECK_MESSAGE(a.after.at(name).to_vector<double>() == v.to_vector<double>(), tag, " ", name, " after the step");
  }
}

TEST_CASE("on CUDA, fused tails with in-place residual gradients equal the unfused within f32's error") {
  if (!have_gpu("fused block tails on CUDA equal the unfused composition")) return;
  const Result ref = run(false, Device::cpu(), DType::f64, MemoryFormat::contiguous);
  const Result plain = run(false, Device::cpu(), DType::f32, MemoryFormat::contiguous);
  cuda::set_cudnn_allow_tf32(false);
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    const std::string tag = f == MemoryFormat::channels_last ? "cuda f32 NHWC" : "cuda f32 NCHW";
    const Result gp = run(false, gpu(), DType::f32, f), gf = run(true, gpu(), DType::f32, f);
    const double k = test::kYardstickEngines;
    CHECK(std::abs(gf.loss - gp.loss) <= k * std::abs(plain.loss - ref.loss) + test::kYardstickFloor);
    check_within(gf.grads, gp.grads, plain.grads, ref.grads, k, tag + " gradients");
    check_within(gf.after, gp.after, plain.after, ref.after, k, tag + " state after the step");
  }
}

// Note [Statistics from the convolution] in engine/ops/batch_norm.cc: with TF32 allowed the
// fused engine runs f32 channels-last convolutions with their output sums, and every batch
// norm whose input channels it takes (all but the stem's: 3 input channels) uses them. The
// statistics then differ from the Welford pass's by f32 rounding (and, on a GPU, the fused
// engine's y by its accumulation order). TF32 rounds every convolution's inputs to 10
// mantissa bits, so a perturbation of 1e-7 flips some of those roundings and grows, layer by
// layer, to TF32's own error (measured under the emulator: running means 5e-8 apart after
// the first block, 6e-4 after the last, gradients 2%): the yardstick here is the TF32 run's
// error against f64, and the sums run must be as accurate (within 3x of it: two runs with
// independent TF32 errors differ by about sqrt(2) times either's: kYardstickIndependent).
TEST_CASE("on CUDA, batch norm statistics from the convolutions' sums equal the statistics pass within f32's error") {
  if (!have_gpu("batch norm statistics from the convolutions' sums")) return;
  const Result ref = run(false, Device::cpu(), DType::f64, MemoryFormat::contiguous);
  const Result plain = run(false, Device::cpu(), DType::f32, MemoryFormat::contiguous);
  cuda::set_cudnn_allow_tf32(true);
  // Without the prologue (the next case's): the statistics are the only difference.
  const Result pass = run(true, gpu(), DType::f32, MemoryFormat::channels_last, false, false);
  const int64_t fused_before = cuda::conv_cache_stats().fused;
  const Result sums = run(true, gpu(), DType::f32, MemoryFormat::channels_last, true, false);
  cuda::set_cudnn_allow_tf32(false);
  // The second run planned fused convolutions (every convolution but the stem's).
  CHECK(cuda::conv_cache_stats().fused > fused_before);
  const double k = test::kYardstickIndependent;
  CHECK(std::abs(sums.loss - pass.loss) <= k * std::abs(pass.loss - ref.loss) + test::kYardstickFloor);
  check_within(sums.grads, pass.grads, pass.grads, ref.grads, k, "cuda tf32 NHWC sums gradients");
  check_within(sums.after, pass.after, pass.after, ref.after, k, "cuda tf32 NHWC sums state after the step");
  // And f32's own error is far below TF32's: the sums' rounding is not what the bound allows.
  // (A claim about the two yardsticks, not a tolerance: f32's is at most half of TF32's.)
  check_within(plain.grads, ref.grads, pass.grads, ref.grads, 0.5, "cpu f32 against f64, TF32's error the yardstick");
}

// Note [Batch norm as the next convolution's prologue] in engine/ops/batch_norm_relu_conv2d.cc:
// with TF32 the fused engine also applies bn1 and bn2 of every bottleneck as conv2's and
// conv3's prologue (x * scale + bias, rounded differently from the apply pass's formula) and
// their backward recomputes the relu's mask from x. Judged as the statistics from sums are,
// against TF32's own error; the CPU (no fusion) gives the same bits either way.
TEST_CASE("on CUDA, batch norm as the next convolution's prologue equals its own pass within f32's error") {
  const Result cpu_on = run(true, Device::cpu(), DType::f32, MemoryFormat::channels_last, true, true);
  const Result cpu_off = run(true, Device::cpu(), DType::f32, MemoryFormat::channels_last, true, false);
  for (const auto& [name, g] : cpu_off.grads)
    CHECK_MESSAGE(cpu_on.grads.at(name).to_vector<double>() == g.to_vector<double>(), "cpu gradient of ", name);
  if (!have_gpu("batch norm as the next convolution's prologue")) return;
  const Result ref = run(false, Device::cpu(), DType::f64, MemoryFormat::contiguous);
  cuda::set_cudnn_allow_tf32(true);
  const Result own_pass = run(true, gpu(), DType::f32, MemoryFormat::channels_last, true, false);
  const int64_t fused_before = cuda::conv_cache_stats().fused;
  const Result prologue = run(true, gpu(), DType::f32, MemoryFormat::channels_last, true, true);
  cuda::set_cudnn_allow_tf32(false);
  // The prologue's plans are new fused keys (forward with prologue, weight gradient with prologue).
  CHECK(cuda::conv_cache_stats().fused > fused_before);
  const double k = test::kYardstickIndependent;
  CHECK(std::abs(prologue.loss - own_pass.loss) <= k * std::abs(own_pass.loss - ref.loss) + test::kYardstickFloor);
  check_within(prologue.grads, own_pass.grads, own_pass.grads, ref.grads, k, "cuda tf32 NHWC prologue gradients");
  check_within(prologue.after, own_pass.after, own_pass.after, ref.after, k,
               "cuda tf32 NHWC prologue state after the step");
}

// Note [Two batch norms in one tail] in engine/ops/dual_batch_norm_add_relu.cc: every first
// block's tail (a downsample) runs relu(bn3(y3) + bn_ds(y_ds)) as one op on CUDA. In f32 the
// composition's bn_ds output is already in the compute type, so the fused op computes the same
// operations in the same order: a training step with it equals one with bn_ds as its own pass
// bit for bit (gradients, loss, state after the step), both layouts. The CPU (the composition
// either way) gives the same bits too.
TEST_CASE("on CUDA, the downsample's batch norm in the block's tail equals its own pass bit for bit in f32") {
  const auto check_equal = [](const Result& got, const Result& want, const std::string& tag) {
    CHECK_MESSAGE(got.loss == want.loss, tag, " loss");
    for (const auto& [name, g] : want.grads)
      CHECK_MESSAGE(got.grads.at(name).to_vector<double>() == g.to_vector<double>(), tag, " gradient of ", name);
    for (const auto& [name, v] : want.after)
      CHECK_MESSAGE(got.after.at(name).to_vector<double>() == v.to_vector<double>(), tag, " ", name, " after the step");
  };
  check_equal(run(true, Device::cpu(), DType::f32, MemoryFormat::channels_last, true, true, true),
              run(true, Device::cpu(), DType::f32, MemoryFormat::channels_last, true, true, false), "cpu");
  if (!have_gpu("the downsample's batch norm in the block's tail")) return;
  cuda::set_cudnn_allow_tf32(false);
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    const Result own = run(true, gpu(), DType::f32, f, true, true, false);
    const Result dual = run(true, gpu(), DType::f32, f, true, true, true);
    check_equal(dual, own, f == MemoryFormat::channels_last ? "cuda f32 NHWC" : "cuda f32 NCHW");
  }
}

}  // namespace
}  // namespace rt
