// Batch norm + relu as the next convolution's prologue
// (Note [Batch norm as the next convolution's prologue] in engine/ops/batch_norm_relu_conv2d.cc):
// the launchers batch_norm_prologue_coefs and batch_norm_backward_relu_prologue against their
// CPU references (cpu::batch_norm_prologue_coefs; cpu::prologue_keeps as the mask of the CPU
// backward) on randomized shapes, both layouts, a planted kink; then the op against the
// composition conv2d(batch_norm_relu(...)) on the GPU: fused where cuDNN fuses (bf16, f16,
// f32 with TF32, channels-last), the composition bit for bit elsewhere. Without a GPU the
// GPU cases print SKIPPED and pass.
#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/conv2d.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

cudaStream_t stream() { return static_cast<cudaStream_t>(Stream::current(gpu()).handle()); }

TEST_CASE("the prologue's launchers reject bad arguments on the host (runs without a GPU)") {
  float f[4];
  CHECK_THROWS_WITH_AS(cuda::batch_norm_prologue_coefs(0, f, f, f, f, f, f, nullptr),
                       doctest::Contains("bad channel count"), Error);
  CHECK_THROWS_WITH_AS(cuda::batch_norm_prologue_coefs(4, f, nullptr, f, f, f, f, nullptr),
                       doctest::Contains("null pointer"), Error);
  const cuda::BatchNormGeom g{2, 4, 3, true};
  CHECK_THROWS_WITH_AS(cuda::batch_norm_backward_relu_prologue(g, DType::bf16, f, nullptr, f, f, f, f, f, true, f,
                                                               nullptr, nullptr, f, nullptr),
                       doctest::Contains("the prologue's scale and bias"), Error);
  CHECK_THROWS_WITH_AS(cuda::batch_norm_backward_relu_prologue(g, DType::f64, f, f, f, f, f, f, f, true, f, nullptr,
                                                               nullptr, f, nullptr),
                       doctest::Contains("x is f32, bf16 or f16, got f64"), Error);
}

// By hand: a launcher against a CPU reference written here, bit for bit.
TEST_CASE("batch_norm_prologue_coefs matches its CPU reference bit for bit") {
  if (!have_gpu("batch_norm_prologue_coefs")) return;
  uint64_t seed = 10;
  for (int64_t C : {1, 7, 64, 1000})
    for (bool affine : {true, false}) {
      const Tensor m = rnd({C}, ++seed).to(DType::f32), is = add(rnd({C}, ++seed), 2.0).to(DType::f32);
      const Tensor gm = rnd({C}, ++seed).to(DType::f32), bt = rnd({C}, ++seed).to(DType::f32);
      std::vector<float> scale(static_cast<size_t>(C)), bias(static_cast<size_t>(C));
      cpu::batch_norm_prologue_coefs(C, m.data<float>(), is.data<float>(), affine ? gm.data<float>() : nullptr,
                                     affine ? bt.data<float>() : nullptr, scale.data(), bias.data());
      Tensor gs = poisoned({C}, DType::f32), gb = poisoned({C}, DType::f32);
      const Tensor dm = m.to(gpu()), di = is.to(gpu()), dg = gm.to(gpu()), db = bt.to(gpu());
      cuda::batch_norm_prologue_coefs(C, dm.data<float>(), di.data<float>(), affine ? dg.data<float>() : nullptr,
                                      affine ? db.data<float>() : nullptr, gs.data<float>(), gb.data<float>(),
                                      stream());
      const std::string what = "prologue coefs C=" + std::to_string(C) + (affine ? " affine" : "");
      check_close(gs.to_vector<double>(), std::vector<double>(scale.begin(), scale.end()), kExact, what + " scale");
      check_close(gb.to_vector<double>(), std::vector<double>(bias.begin(), bias.end()), kExact, what + " bias");
    }
}

// By hand: a launcher against a CPU backward masked here, and the kink element on its own.
TEST_CASE("batch_norm_backward_relu_prologue matches the CPU backward masked by the prologue's test") {
  if (!have_gpu("batch_norm_backward_relu_prologue")) return;
  Generator gen(2026);
  uint64_t seed = 100;
  for (int trial = 0; trial < 12; ++trial) {
    const DType t = trial % 3 == 0 ? DType::bf16 : trial % 3 == 1 ? DType::f16 : DType::f32;
    const MemoryFormat f = trial % 4 < 2 ? MemoryFormat::channels_last : MemoryFormat::contiguous;
    // Randomized: batch 1-3, channels off the vector width (and on it), 1x1 and odd sizes.
    const int64_t N = 1 + int64_t(gen.next_u64() % 3);
    const int64_t C = std::vector<int64_t>{1, 3, 8, 13, 24, 40}[gen.next_u64() % 6];
    const int64_t H = std::vector<int64_t>{1, 3, 5}[gen.next_u64() % 3], W = 1 + int64_t(gen.next_u64() % 6);
    const bool training = trial != 5;
    const Shape shape{N, C, H, W};
    const std::string what = label("batch_norm_backward_relu_prologue", t, shape, f) + (training ? "" : " eval");
    // x as the GPU sees it (rounded to t); the statistics and coefficients as f32 values.
    const Tensor x64 = rnd(shape, ++seed).to(t).to(DType::f64), dy64 = rnd(shape, ++seed).to(t).to(DType::f64);
    const Tensor mean = mul(rnd({C}, ++seed), 0.2).to(DType::f32), invstd = add(rnd({C}, ++seed), 2.0).to(DType::f32);
    const Tensor gamma = rnd({C}, ++seed).to(DType::f32), beta = rnd({C}, ++seed).to(DType::f32);
    std::vector<float> sc(static_cast<size_t>(C)), sh(static_cast<size_t>(C));
    cpu::batch_norm_prologue_coefs(C, mean.data<float>(), invstd.data<float>(), gamma.data<float>(),
                                   beta.data<float>(), sc.data(), sh.data());
    std::vector<double> xv = in_fmt(x64, f).contiguous().to_vector<double>();  // logical NCHW order
    // Plant the kink in element 0 of channel 0: x * scale rounds to exactly -bias, which an
    // FMA would not (Note [Batch norm as the next convolution's prologue]); f32 only, where x
    // holds the value exactly.
    if (t == DType::f32) {
      const float a = 1.0f + std::ldexp(1.0f, -23);
      xv[0] = a, sc[0] = a, sh[0] = -(1.0f + std::ldexp(1.0f, -22));
      CHECK_FALSE(cpu::prologue_keeps(a, sc[0], sh[0]));
    }
    // The CPU reference in double, masked by relu_y = 1 where the prologue keeps x, 0 elsewhere.
    const int64_t S = H * W;
    std::vector<double> mask(xv.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < S; ++i) {
          const size_t e = size_t((n * C + c) * S + i);
          mask[e] = cpu::prologue_keeps(float(xv[e]), sc[size_t(c)], sh[size_t(c)]) ? 1.0 : 0.0;
        }
    const std::vector<double> dyv = dy64.to_vector<double>(), m = mean.to_vector<double>(),
                              is = invstd.to_vector<double>(), gv = gamma.to_vector<double>();
    const cpu::BatchNormGeom cg{N, C, S, false};
    const size_t Cs = static_cast<size_t>(C);
    std::vector<double> sum_dz(Cs), sum_dz_xmu(Cs), dg(Cs), db(Cs), dx(xv.size());
    cpu::batch_norm_grad_sums<double>(cg, xv.data(), mask.data(), dyv.data(), m.data(), is.data(), sum_dz.data(),
                                      sum_dz_xmu.data(), dg.data(), db.data(), nullptr);
    cpu::batch_norm_backward_dx<double>(cg, xv.data(), mask.data(), dyv.data(), m.data(), is.data(), gv.data(),
                                        training, double(N * S), sum_dz.data(), sum_dz_xmu.data(), dx.data());

    const Tensor gx = in_fmt(Tensor::from_vector(xv, shape).to(t), f).to(gpu()), gdy = to_gpu(dy64, t, f);
    const Tensor gsc = Tensor::from_vector(sc, {C}).to(gpu()), gsh = Tensor::from_vector(sh, {C}).to(gpu());
    const Tensor gm = mean.to(gpu()), gi = invstd.to(gpu()), gg = gamma.to(gpu());
    Tensor gdx = poisoned(shape, t, f), gdg = poisoned({C}, DType::f32), gdb = poisoned({C}, DType::f32);
    const cuda::BatchNormGeom g{N, C, S, f == MemoryFormat::channels_last};
    Tensor work = Tensor::empty({int64_t(cuda::batch_norm_backward_workspace_bytes(g, t))}, DType::u8, gpu());
    cuda::batch_norm_backward_relu_prologue(g, t, gx.raw_data(), gsc.data<float>(), gsh.data<float>(), gdy.raw_data(),
                                            gm.raw_data(), gi.raw_data(), gg.raw_data(), training, gdx.raw_data(),
                                            gdg.raw_data(), gdb.raw_data(), work.raw_data(), stream());
    // dgamma, dbeta: f32 sums over N*S terms; dx in t (f32 math, rounded once).
    const double M = double(N * S);
    check_close(gdg.to_vector<double>(), dg, kGpuTolF32, what + " dgamma", std::sqrt(M));
    check_close(gdb.to_vector<double>(), db, kGpuTolF32, what + " dbeta", std::sqrt(M));
    check_on_gpu(gdx, in_fmt(Tensor::from_vector(dx, shape), f).to(ref_dtype(t)), gpu_tol_for(t), what + " dx");
    if (t == DType::f32) {  // the kink element was not kept: its dz is 0, so dx there has no k * dy term
      const double k0 = double(gv[0]) * is[0];
      const double got = gdx.to(Device::cpu()).contiguous().to_vector<double>()[0];
      // f32's absolute tolerance (the table's), scaled by the k * dy term a wrong mask would add.
      CHECK_MESSAGE(std::fabs(got - dx[0]) <= kGpuTolF32.atol * (1 + std::fabs(k0 * dyv[0])), what, " kink element");
    }
  }
}

// One run of the op or of its composition on the GPU: y, its sums, running statistics, and the
// gradients of x, weight, bias and the convolution's weight.
struct Run {
  Tensor y, rm, rv;
  ChannelSums sums;
  std::vector<Tensor> grads;
};

struct OpCase {
  DType t;
  MemoryFormat f;
  bool tf32, training, x_sums, y_sums;
  int64_t N, C, H, W, O, K;
  int stride;
  bool fused;  // whether cuDNN fuses it (else the op is the composition, bit for bit)
};

Run run_op(const OpCase& c, bool fused_op, uint64_t seed) {
  const Shape xs{c.N, c.C, c.H, c.W};
  // Means of the order of the standard deviations, as a convolution's outputs have.
  const Tensor x64 = add(mul(rnd(xs, seed), 2.0), 0.3);
  Tensor x = to_gpu(x64, c.t, c.f).set_requires_grad(true);
  const DType st = cuda::batch_norm_stat_dtype(c.t);  // mixed precision's masters: f32 (f64 for f64)
  Tensor w = to_gpu(add(rnd({c.C}, seed + 1), 1.0), st).set_requires_grad(true);
  Tensor b = to_gpu(rnd({c.C}, seed + 2), st).set_requires_grad(true);
  Tensor cw = to_gpu(mul(rnd({c.O, c.C, c.K, c.K}, seed + 3), 0.3), c.t, c.f).set_requires_grad(true);
  Run r;
  r.rm = rnd({c.C}, seed + 4).to(DType::f32).to(gpu()), r.rv = Tensor::full({c.C}, 1.5, DType::f32, gpu());
  ChannelSums xsums;
  if (c.x_sums) {
    std::vector<double> s, q, a;
    channel_sums(x.detach(), &s, &q, &a);
    xsums = {Tensor::from_vector(s, {c.C}).to(DType::f32).to(gpu()),
             Tensor::from_vector(q, {c.C}).to(DType::f32).to(gpu())};
  }
  const Conv2dParams p = Conv2dParams::make(c.stride, c.K / 2);
  ChannelSums* ys = c.y_sums ? &r.sums : nullptr;
  cuda::set_cudnn_allow_tf32(c.tf32);
  r.y = fused_op ? batch_norm_relu_conv2d(x, w, b, r.rm, r.rv, c.training, 0.1, 1e-5, nullptr, xsums, cw, p, ys)
                 : conv2d(batch_norm_relu(x, w, b, r.rm, r.rv, c.training, 0.1, 1e-5, nullptr, xsums), cw, Tensor(),
                          p, ys);
  r.y.backward(to_gpu(rnd(r.y.shape(), seed + 5), c.t, c.f));
  cuda::set_cudnn_allow_tf32(false);
  r.grads = {x.grad(), w.grad(), b.grad(), cw.grad()};
  return r;
}

// By hand: fused against unfused, both on the GPU, and bit for bit where nothing is fused.
TEST_CASE("batch_norm_relu_conv2d equals the composition: fused within the dtype's tolerance, else bit for bit") {
  if (!have_gpu("batch_norm_relu_conv2d")) return;
  const MemoryFormat cl = MemoryFormat::channels_last, nchw = MemoryFormat::contiguous;
  const std::vector<OpCase> cases = {
      {DType::bf16, cl, false, true, true, true, 2, 16, 5, 7, 24, 1, 1, true},
      {DType::bf16, cl, false, true, false, false, 1, 12, 7, 5, 8, 3, 2, true},   // statistics by a pass; C % 8 != 0
      {DType::f16, cl, false, true, true, true, 3, 4, 1, 1, 20, 1, 1, true},      // 1x1 spatial, batch 3
      {DType::f16, cl, false, false, false, true, 2, 20, 3, 3, 12, 3, 1, true},   // eval: running statistics
      {DType::f32, cl, true, true, true, true, 2, 8, 5, 5, 8, 3, 1, true},        // f32 with TF32
      {DType::f32, cl, false, true, false, true, 2, 8, 5, 5, 8, 3, 1, false},     // f32 without TF32: composition
      {DType::bf16, nchw, false, true, false, true, 2, 8, 5, 5, 8, 3, 1, false},  // NCHW: composition
      {DType::f64, cl, false, true, false, false, 2, 3, 4, 4, 5, 3, 2, false},    // f64: composition
  };
  uint64_t seed = 1000;
  for (const OpCase& c : cases) {
    seed += 10;
    const std::string what = label("batch_norm_relu_conv2d", c.t, {c.N, c.C, c.H, c.W}, c.f) +
                             (c.tf32 ? " tf32" : "") + (c.training ? "" : " eval") + (c.x_sums ? " x sums" : "") +
                             (c.y_sums ? " y sums" : "") + " K" + std::to_string(c.K) + " s" + std::to_string(c.stride);
    const int64_t fused_before = cuda::conv_cache_stats().fused;
    const Run a = run_op(c, true, seed);
    const int64_t fused_plans = cuda::conv_cache_stats().fused - fused_before;
    const Run b = run_op(c, false, seed);
    // The fused op asks for its forward plan with the prologue (and the weight gradient's):
    // new fused plans exactly where cuDNN fuses (the composition's genstats plans come after).
    CHECK_MESSAGE((fused_plans > 0) == c.fused, what, ": ", fused_plans, " new fused plans");
    CHECK_MESSAGE(a.sums.defined() == b.sums.defined(), what, " y sums");
    const char* gname[] = {" dx", " dweight", " dbias", " dconv_weight"};
    if (!c.fused) {  // the composition itself: the same kernels in the same order
      check_on_gpu(a.y, b.y.to(Device::cpu()), kExact, what + " y");
      for (size_t i = 0; i < 4; ++i) check_on_gpu(a.grads[i], b.grads[i].to(Device::cpu()), kExact, what + gname[i]);
      check_on_gpu(a.rm, b.rm.to(Device::cpu()), kExact, what + " running_mean");
      continue;
    }
    // The prologue's x * scale + bias and the apply pass's (x - mean) * invstd * gamma + beta
    // round differently (then once more to t): y within the dtype's tolerance over C*K*K
    // products; the gradients likewise over the terms each sums.
    const int64_t HO = a.y.size(2), WO = a.y.size(3);
    const Tol tol = gpu_tol_for(c.t);
    check_on_gpu(a.y, b.y.to(Device::cpu()).to(ref_dtype(c.t)), tol, what + " y", std::sqrt(double(c.C * c.K * c.K)));
    check_on_gpu(a.rm, b.rm.to(Device::cpu()), kExact, what + " running_mean");  // the same statistics
    check_on_gpu(a.rv, b.rv.to(Device::cpu()), kExact, what + " running_var");
    const double terms[] = {double(c.O * c.K * c.K), double(c.N * c.H * c.W), double(c.N * c.H * c.W),
                            double(c.N * HO * WO)};
    for (size_t i = 0; i < 4; ++i) {
      const bool param = i == 1 || i == 2;
      check_on_gpu(a.grads[i], b.grads[i].to(Device::cpu()).to(ref_dtype(b.grads[i].dtype())),
                   param ? gpu_tol_for(c.t == DType::f32 ? DType::f32 : c.t) : tol, what + gname[i],
                   std::sqrt(terms[i]) * (param ? std::sqrt(double(c.O * c.K * c.K)) : 1.0));
    }
    // The fused forward's sums are those of the y it wrote (f32 accumulation).
    if (a.sums.defined()) check_channel_sums(a.y, a.sums.sum, a.sums.sqsum, what);
  }
}

}  // namespace
}  // namespace rt
