// Batch norm's statistics from a convolution's channel sums
// (Note [Statistics from the convolution] in engine/ops/batch_norm.cc): the launcher batch_norm_stats_from_sums against
// its CPU reference (cpu::batch_norm_stats_from_sums) on NaN-poisoned outputs, with running
// statistics of every float dtype, a rounded-away negative variance and a NaN sum; conv2d
// asked for ChannelSums (filled where the fused engine runs: bf16/f16 channels-last; left
// undefined for f32 without TF32, NCHW, a bias, groups, the CPU) against the sums of the y it
// wrote; then the op batch_norm(_relu, _add_relu) with those sums against the same op
// computing its own statistics, forward, running statistics and backward. Without a GPU the
// GPU cases print SKIPPED and pass.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/conv2d.h"
#include "tests/cuda/batch_norm_cuda_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

// What a fused convolution hands the batch norm: x's exact sums rounded to f32 once.
ChannelSums sums_of(const Tensor& x) {
  std::vector<double> s, q, a;
  channel_sums(x, &s, &q, &a);
  const int64_t C = x.size(1);
  return {Tensor::from_vector(s, {C}).to(DType::f32).to(x.device()),
          Tensor::from_vector(q, {C}).to(DType::f32).to(x.device())};
}

TEST_CASE("batch_norm_stats_from_sums rejects bad arguments on the host (runs without a GPU)") {
  float f[4];
  CHECK_THROWS_WITH_AS(cuda::batch_norm_stats_from_sums(4, DType::f32, 1, f, f, 1e-5, f, f, DType::f32, nullptr,
                                                        nullptr, 0.1, nullptr),
                       doctest::Contains("more than one value per channel"), Error);
  CHECK_THROWS_WITH_AS(cuda::batch_norm_stats_from_sums(4, DType::f32, 8, nullptr, f, 1e-5, f, f, DType::f32, nullptr,
                                                        nullptr, 0.1, nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(cuda::batch_norm_stats_from_sums(4, DType::f32, 8, f, f, 1e-5, f, f, DType::f32, f, nullptr,
                                                        0.1, nullptr),
                       doctest::Contains("go together"), Error);
  // The CPU reference: a negative difference is rounding (variance 0), a NaN stays NaN.
  const float sum[3] = {4, 2, std::numeric_limits<float>::quiet_NaN()}, sq[3] = {10, 0.99f, 1};
  double mean[3], var[3];
  cpu::batch_norm_stats_from_sums(3, 4, sum, sq, mean, var);
  CHECK(mean[0] == 1.0);
  CHECK(var[0] == 1.5);  // 10/4 - 1
  CHECK(var[1] == 0.0);  // 0.99/4 - 0.25 < 0
  CHECK(std::isnan(mean[2]));
  CHECK(std::isnan(var[2]));
}

// By hand: a launcher with running statistics in place, against a host reference written here.
TEST_CASE("batch_norm_stats_from_sums matches its CPU reference") {
  if (!have_gpu("batch_norm_stats_from_sums matches its CPU reference")) return;
  const double eps = 1e-5, momentum = 0.1;
  uint64_t seed = 40;
  for (DType t : kFloatTypes)
    for (int64_t C : {1, 5, 37, 2560}) {
      const DType st = cuda::batch_norm_stat_dtype(t);
      const int64_t count = 3 + C % 7 * 101;
      const std::string what = std::string("stats from sums ") + dtype_name(t) + " C=" + std::to_string(C);
      // Sums of `count` values with means in [-1, 1) and variances in [0.5, 1.5): sqsum =
      // count * (var + mean^2); channel 0 gets a rounded-away variance (sqsum below sum^2 / n).
      const std::vector<double> m = rnd({C}, ++seed).to_vector<double>(), v = rnd({C}, ++seed).to_vector<double>();
      std::vector<float> sum(static_cast<size_t>(C)), sq(static_cast<size_t>(C));
      for (size_t c = 0; c < size_t(C); ++c) {
        sum[c] = float(double(count) * m[c]);
        sq[c] = float(double(count) * (v[c] + 1.0 + m[c] * m[c]));
      }
      sq[0] = float(double(sum[0]) * double(sum[0]) / double(count) * (1 - 1e-6));
      std::vector<double> mean(static_cast<size_t>(C)), var(static_cast<size_t>(C)), invstd(static_cast<size_t>(C));
      cpu::batch_norm_stats_from_sums(C, count, sum.data(), sq.data(), mean.data(), var.data());
      for (size_t c = 0; c < size_t(C); ++c) invstd[c] = 1.0 / std::sqrt(var[c] + eps);
      CHECK(var[0] == 0.0);
      const Tensor gsum = Tensor::from_vector(sum, {C}).to(gpu()), gsq = Tensor::from_vector(sq, {C}).to(gpu());
      // Both in double from the same f32 sums; the GPU rounds once to its statistics dtype.
      const Tol tol = gpu_tol_for(st);
      // Running statistics of every float dtype (Note [Running statistics of any dtype] in
      // tests/cuda/batch_norm_cuda_util.h), from the values as stored in it.
      const Tensor rm64 = rnd({C}, ++seed);
      for (DType r : kFloatTypes) {
        const std::string rwhat = what + " running " + dtype_name(r);
        const Tensor rm_r = rm64.to(r);
        std::vector<double> rm = rm_r.to_vector<double>(), rv(size_t(C), 1.0);
        update_running(rm, rv, mean, var, double(count), momentum);
        Tensor gm = poisoned({C}, st), gi = poisoned({C}, st);
        Tensor grm = rm_r.to(gpu()), grv = Tensor::full({C}, 1.0, r, gpu());
        cuda::batch_norm_stats_from_sums(C, t, count, gsum.data<float>(), gsq.data<float>(), eps, gm.raw_data(),
                                         gi.raw_data(), r, grm.raw_data(), grv.raw_data(), momentum, stream());
        check_close(gm.to_vector<double>(), mean, tol, rwhat + " mean");
        check_close(gi.to_vector<double>(), invstd, tol, rwhat + " invstd");
        check_close(grm.to_vector<double>(), rm, running_tol(t, r), rwhat + " running_mean");
        check_close(grv.to_vector<double>(), rv, running_tol(t, r), rwhat + " running_var");
      }
      // Without running statistics.
      Tensor gm2 = poisoned({C}, st), gi2 = poisoned({C}, st);
      cuda::batch_norm_stats_from_sums(C, t, count, gsum.data<float>(), gsq.data<float>(), eps, gm2.raw_data(),
                                       gi2.raw_data(), DType::f32, nullptr, nullptr, momentum, stream());
      check_close(gi2.to_vector<double>(), invstd, tol, what + " invstd without running statistics");
    }
  // A NaN sum gives a NaN mean and invstd (not a variance clamped to 0).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor s = Tensor::from_vector(std::vector<float>{nan}, {1}).to(gpu());
  const Tensor q = Tensor::from_vector(std::vector<float>{1.0f}, {1}).to(gpu());
  Tensor gm = poisoned({1}, DType::f32), gi = Tensor::zeros({1}, DType::f32).to(gpu());
  cuda::batch_norm_stats_from_sums(1, DType::f32, 4, s.data<float>(), q.data<float>(), 1e-5, gm.raw_data(),
                                   gi.raw_data(), DType::f32, nullptr, nullptr, 0.1, stream());
  CHECK(std::isnan(gi.to_vector<double>()[0]));
}

// By hand: the fused sums are checked against the GPU's own y, a property, not a CPU run.
TEST_CASE("conv2d fills ChannelSums where the fused engine runs, and they are the sums of its y") {
  if (!have_gpu("conv2d with ChannelSums")) return;
  const MemoryFormat cl = MemoryFormat::channels_last, nchw = MemoryFormat::contiguous;
  uint64_t seed = 60;
  struct Case {
    DType t;
    MemoryFormat f;
    bool bias;
    int groups;
    bool tf32, fused;
  };
  for (const Case& c : {Case{DType::bf16, cl, false, 1, false, true}, Case{DType::f16, cl, false, 1, false, true},
                        Case{DType::f32, cl, false, 1, false, false}, Case{DType::f32, cl, false, 1, true, true},
                        Case{DType::bf16, nchw, false, 1, false, false}, Case{DType::bf16, cl, true, 1, false, false},
                        Case{DType::bf16, cl, false, 2, false, false}}) {
    cuda::set_cudnn_allow_tf32(c.tf32);
    const int64_t N = 2, C = 12, H = 7, W = 5, O = 20, K = 3;
    const std::string what = label("conv2d with sums", c.t, {N, C, H, W}, c.f) + (c.bias ? " bias" : "") +
                             (c.groups > 1 ? " groups 2" : "") + (c.tf32 ? " tf32" : "");
    const Tensor x = to_gpu(rnd({N, C, H, W}, ++seed), c.t, c.f);
    const Tensor w = to_gpu(rnd({O, C / c.groups, K, K}, ++seed), c.t, c.f);
    const Tensor b = c.bias ? to_gpu(rnd({O}, ++seed), c.t) : Tensor();
    Conv2dParams p = Conv2dParams::make(2, 1);
    p.groups = c.groups;
    ChannelSums sums;
    sums.sum = Tensor::zeros({1});  // a stale value the call must clear
    const Tensor y = conv2d(x, w, b, p, &sums);
    const Tensor plain = conv2d(x, w, b, p);
    cuda::set_cudnn_allow_tf32(false);
    CHECK_MESSAGE(sums.defined() == c.fused, what);
    // The fused engine's y against the one conv2d picks unfused: the same sums of products
    // (TF32's rounding of the inputs on both sides with c.tf32).
    check_on_gpu(y, plain.to(Device::cpu()).to(ref_dtype(c.t)), gpu_tol_for(c.t), what + " y",
                 std::sqrt(double(C * K * K)));
    if (!sums.defined()) continue;
    CHECK(sums.sum.dtype() == DType::f32);
    CHECK(sums.sum.shape() == Shape{O});
    check_channel_sums(y, sums.sum, sums.sqsum, what);  // f32 accumulation over N*HO*WO terms
  }
  // The CPU never fills them.
  ChannelSums cpu_sums;
  (void)conv2d(rnd({1, 4, 3, 3}, 1).to(DType::f32), rnd({4, 4, 1, 1}, 2).to(DType::f32), Tensor(),
               Conv2dParams::make(1, 0), &cpu_sums);
  CHECK(!cpu_sums.defined());
}

// By hand: two GPU paths (given sums, own statistics) against each other, running statistics too.
TEST_CASE("batch norm with a convolution's sums equals batch norm computing its own statistics") {
  if (!have_gpu("batch norm with channel sums")) return;
  uint64_t seed = 80;
  for (DType t : {DType::bf16, DType::f16, DType::f32})
    for (int tail : {0, 1, 2}) {  // batch_norm, batch_norm_relu, batch_norm_add_relu
      const Shape shape{3, 24, 5, 7};
      const int64_t C = shape[1], M = shape_numel(shape) / C;
      const char* name = tail == 0 ? "batch_norm" : tail == 1 ? "batch_norm_relu" : "batch_norm_add_relu";
      const std::string what = label(std::string(name) + " from sums", t, shape, MemoryFormat::channels_last);
      // Means of the order of the standard deviations, as a convolution's outputs have.
      const Tensor x64 = add(mul(rnd(shape, ++seed), 2.0), 0.5), r64 = rnd(shape, ++seed);
      const Tensor w64 = rnd({C}, ++seed), b64 = rnd({C}, ++seed), dy64 = rnd(shape, ++seed);
      const Tensor rm64 = rnd({C}, ++seed);
      auto run = [&](bool with_sums, Tensor* rm, Tensor* rv, std::vector<Tensor>* grads) {
        Tensor x = to_gpu(x64, t, MemoryFormat::channels_last).set_requires_grad(true);
        Tensor w = to_gpu(w64, DType::f32).set_requires_grad(true), b = to_gpu(b64, DType::f32).set_requires_grad(true);
        Tensor r = to_gpu(r64, t, MemoryFormat::channels_last).set_requires_grad(true);
        *rm = rm64.to(DType::f32).to(gpu()), *rv = Tensor::full({C}, 1.0, DType::f32, gpu());
        const ChannelSums sums = with_sums ? sums_of(x.detach()) : ChannelSums{};
        const Tensor y = tail == 0   ? batch_norm(x, w, b, *rm, *rv, true, 0.1, 1e-5, nullptr, sums)
                         : tail == 1 ? batch_norm_relu(x, w, b, *rm, *rv, true, 0.1, 1e-5, nullptr, sums)
                                     : batch_norm_add_relu(x, r, w, b, *rm, *rv, true, 0.1, 1e-5, nullptr, sums);
        y.backward(to_gpu(dy64, t, MemoryFormat::channels_last));
        *grads = {x.grad(), w.grad(), b.grad()};
        if (tail == 2) grads->push_back(r.grad());
        return y;
      };
      Tensor rm_a, rv_a, rm_b, rv_b;
      std::vector<Tensor> ga, gb;
      const Tensor ya = run(true, &rm_a, &rv_a, &ga), yb = run(false, &rm_b, &rv_b, &gb);
      // The two statistics differ by f32 rounding (Note [Statistics from the convolution]);
      // outputs and gradients in the data's dtype, their sums over M values scaled as such.
      const Tensor yb_ref = yb.to(Device::cpu()).to(ref_dtype(t));
      check_on_gpu(ya, yb_ref, gpu_tol_for(t), what + " y");
      check_on_gpu(rm_a, rm_b.to(Device::cpu()), kGpuTolF32, what + " running_mean");
      check_on_gpu(rv_a, rv_b.to(Device::cpu()), kGpuTolF32, what + " running_var");
      const char* gname[] = {" dx", " dweight", " dbias", " dresidual"};
      for (size_t i = 0; i < ga.size(); ++i) {
        const bool param = i == 1 || i == 2;  // f32 masters' gradients, sums over M values
        check_on_gpu(ga[i], gb[i].to(Device::cpu()).to(ref_dtype(gb[i].dtype())), gpu_tol_for(param ? DType::f32 : t),
                     what + gname[i], param ? std::sqrt(double(M)) : 1.0);
      }
    }
}

TEST_CASE("batch norm refuses channel sums it cannot use, naming them") {
  const Tensor x = rnd({2, 4, 3, 3}, 5).to(DType::f32);
  const ChannelSums s{Tensor::zeros({4}, DType::f32), Tensor::zeros({4}, DType::f32)};
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, nullptr, s),
                       doctest::Contains("the CPU computes its statistics itself"), Error);
  if (!have_gpu("batch norm refuses bad channel sums")) return;
  const Tensor xd = x.to(gpu());
  const ChannelSums wrong{Tensor::zeros({3}, DType::f32).to(gpu()), Tensor::zeros({3}, DType::f32).to(gpu())};
  CHECK_THROWS_WITH_AS(batch_norm(xd, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, nullptr, wrong),
                       doctest::Contains("channel sums must be [4] f32"), Error);
  const ChannelSums half{Tensor::zeros({4}, DType::f32).to(gpu()), Tensor()};
  CHECK_THROWS_WITH_AS(batch_norm(xd, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, nullptr, half),
                       doctest::Contains("got undefined"), Error);
}

}  // namespace
}  // namespace rt
