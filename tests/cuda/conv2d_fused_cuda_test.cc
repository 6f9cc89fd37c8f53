// The fused cuDNN convolutions (Note [Fused convolutions] in kernels/cuda/conv2d.h) against
// their unfused composition on the CPU: the batch-norm prologue x' = relu?(x * scale + bias)
// computed on the host in f32 and rounded to the data's dtype, then the CPU backend's conv2d
// (forward, and the weight gradient through autograd); genstats' sums against the sums of
// the y the GPU stored, in double. Shapes drawn from a seed: batch 1 and 2, odd and 1x1
// spatial sizes, channel counts a multiple of 4 but not of 8, 1x1 and 3x3 filters, stride 1
// and 2. Then which keys have a fused plan at all (the tiers of Note [Conv numerics]): none
// for f32 without TF32 or for NCHW (the runtime-fusion engines are tensor-core NHWC ones),
// and the keys conv_plan refuses. Without a GPU the GPU cases print SKIPPED and pass.
#include <cmath>
#include <random>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cuda/conv2d.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

struct Shape4 {
  int64_t N, C, H, W, O, K, stride, pad;
};

struct Fusion {
  bool prologue, relu, genstats;
  const char* name;
};

constexpr Fusion kForwardFusions[] = {{true, true, true, "scale_bias_relu+genstats"},
                                      {true, false, true, "scale_bias+genstats"},
                                      {true, true, false, "scale_bias_relu"},
                                      {false, false, true, "genstats"}};

std::vector<Shape4> drawn_shapes(uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::initializer_list<int64_t> v) { return *(v.begin() + int64_t(rng() % v.size())); };
  std::vector<Shape4> out;
  for (int i = 0; i < count; ++i) {
    Shape4 s;
    s.N = pick({1, 2});
    s.C = pick({4, 12, 20});
    s.O = pick({4, 12, 16});
    s.K = pick({1, 3});
    s.stride = pick({1, 2});
    s.pad = s.K == 3 ? pick({0, 1}) : 0;
    s.H = pick({1, 5, 7});
    s.W = pick({1, 3, 6});
    if (s.H + 2 * s.pad < s.K) s.H = s.K;
    if (s.W + 2 * s.pad < s.K) s.W = s.K;
    out.push_back(s);
  }
  return out;
}

std::string describe(const Shape4& s, DType t, const char* fusion) {
  return label(std::string("conv2d ") + fusion, t, {s.N, s.C, s.H, s.W}, MemoryFormat::channels_last) + " O" +
         std::to_string(s.O) + " k" + std::to_string(s.K) + " s" + std::to_string(s.stride) + " p" +
         std::to_string(s.pad);
}

cuda::ConvKey key_of(const Shape4& s, cuda::ConvKind kind, DType t, bool nhwc, const Fusion& f) {
  cuda::ConvKey k;
  k.kind = kind;
  k.N = s.N, k.C = s.C, k.H = s.H, k.W = s.W, k.O = s.O, k.KH = s.K, k.KW = s.K;
  k.sh = k.sw = s.stride, k.ph = k.pw = s.pad;
  k.dtype = t;
  k.nhwc = nhwc;
  k.align = 16;  // the device allocator's blocks
  k.prologue = f.prologue, k.prologue_relu = f.relu, k.genstats = f.genstats;
  k.device = 0;
  return k;
}

// x' = relu?(x * scale[c] + bias[c]) as the prologue computes it: f32 products and sums,
// rounded once to t, returned widened to ref_dtype(t) (logical NCHW order throughout).
Tensor prologue_ref(const Tensor& x_ref, const std::vector<float>& scale, const std::vector<float>& bias, bool relu,
                    DType t) {
  const std::vector<float> xv = x_ref.to_vector<float>();
  const int64_t N = x_ref.size(0), C = x_ref.size(1), S = x_ref.size(2) * x_ref.size(3);
  std::vector<float> out(xv.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < S; ++i) {
        const size_t at = size_t((n * C + c) * S + i);
        const float v = xv[at] * scale[size_t(c)] + bias[size_t(c)];
        out[at] = relu ? std::max(v, 0.0f) : v;
      }
  return Tensor::from_vector(out, x_ref.shape()).to(t).to(ref_dtype(t)).to(MemoryFormat::channels_last);
}

std::vector<float> drawn_floats(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

struct Device4 {
  Tensor x, w, y, scale, bias, sum, sqsum;
};

// Runs the fused forward of `k` on the GPU; y, sum and sqsum in the result.
Device4 run_forward(const cuda::ConvKey& k, const Tensor& x64, const Tensor& w64, const std::vector<float>& scale,
                    const std::vector<float>& bias, int64_t HO, int64_t WO) {
  const MemoryFormat cl = MemoryFormat::channels_last;
  Device4 d;
  d.x = to_gpu(x64, k.dtype, cl), d.w = to_gpu(w64, k.dtype, cl);
  d.y = poisoned({k.N, k.O, HO, WO}, k.dtype, cl);
  d.scale = Tensor::from_vector(scale, {k.C}).to(gpu()), d.bias = Tensor::from_vector(bias, {k.C}).to(gpu());
  d.sum = poisoned({k.O}, DType::f32), d.sqsum = poisoned({k.O}, DType::f32);
  const cuda::ConvPlan* plan = cuda::conv_fused_plan(k);
  REQUIRE_MESSAGE(plan, "no fused plan for ", k.str());
  const Tensor ws = Tensor::empty({int64_t(std::max<size_t>(cuda::conv_workspace_bytes(*plan), 1))}, DType::u8, gpu());
  cuda::ConvFusedArgs f;
  if (k.prologue) f.scale = d.scale.raw_data(), f.bias = d.bias.raw_data();
  if (k.genstats) f.sum = d.sum.raw_data(), f.sqsum = d.sqsum.raw_data();
  const auto s = static_cast<cudaStream_t>(Stream::current(gpu()).handle());
  cuda::conv_execute(*plan, d.x.raw_data(), d.w.raw_data(), d.y.raw_data(), ws.raw_data(), s, f);
  return d;
}

// By hand: fused plans launched directly against the unfused composition, and their channel sums.
TEST_CASE("fused convolution forward: prologue and genstats against the unfused composition") {
  if (!have_gpu("fused convolution forward")) return;
  int cases = 0;
  for (DType t : {DType::bf16, DType::f16}) {
    uint64_t seed = 700 + uint64_t(t == DType::f16) * 100;
    for (const Fusion& fu : kForwardFusions)
      for (const Shape4& s : drawn_shapes(seed++, 3)) {
        const std::string what = describe(s, t, fu.name);
        const int64_t HO = cuda::conv_out_size(s.H, s.K, s.stride, s.pad, 1);
        const int64_t WO = cuda::conv_out_size(s.W, s.K, s.stride, s.pad, 1);
        const Tensor x64 = rnd({s.N, s.C, s.H, s.W}, seed * 7), w64 = rnd({s.O, s.C, s.K, s.K}, seed * 7 + 1);
        // A batch norm's scale and shift: both signs, so the ReLU cuts part of every channel.
        const std::vector<float> scale = drawn_floats(s.C, seed * 7 + 2, -1.5f, 1.5f);
        const std::vector<float> bias = drawn_floats(s.C, seed * 7 + 3, -0.5f, 0.5f);
        const cuda::ConvKey k = key_of(s, cuda::ConvKind::forward, t, true, fu);
        const Device4 got = run_forward(k, x64, w64, scale, bias, HO, WO);

        const Tensor x_ref = to_ref(x64, t, MemoryFormat::channels_last);
        const Tensor xp = fu.prologue ? prologue_ref(x_ref, scale, bias, fu.relu, t) : x_ref;
        const Tensor y_ref =
            conv2d(xp, to_ref(w64, t, MemoryFormat::channels_last), Tensor(), Conv2dParams::make(int(s.stride), int(s.pad)));
        check_on_gpu(got.y, y_ref, gpu_tol_for(t), what + " y", std::sqrt(double(s.C * s.K * s.K)));
        // Of the y the GPU stored, f32 accumulation over N*HO*WO terms.
        if (fu.genstats) check_channel_sums(got.y, got.sum, got.sqsum, what);
        ++cases;
      }
  }
  CHECK(cases == 24);
}

// By hand: a fused plan launched directly, not an autograd op the harness can run.
TEST_CASE("fused weight gradient: dw = corr(relu(x * scale + bias), dy) against the composition") {
  if (!have_gpu("fused weight gradient")) return;
  const MemoryFormat cl = MemoryFormat::channels_last;
  for (DType t : {DType::bf16, DType::f16})
    for (bool relu : {true, false}) {
      uint64_t seed = 900 + uint64_t(relu) * 10 + uint64_t(t == DType::f16) * 100;
      for (const Shape4& s : drawn_shapes(seed, 3)) {
        const Fusion fu{true, relu, false, relu ? "scale_bias_relu wgrad" : "scale_bias wgrad"};
        const std::string what = describe(s, t, fu.name);
        const int64_t HO = cuda::conv_out_size(s.H, s.K, s.stride, s.pad, 1);
        const int64_t WO = cuda::conv_out_size(s.W, s.K, s.stride, s.pad, 1);
        const Tensor x64 = rnd({s.N, s.C, s.H, s.W}, seed * 7), dy64 = rnd({s.N, s.O, HO, WO}, seed * 7 + 1);
        const Tensor w64 = rnd({s.O, s.C, s.K, s.K}, seed * 7 + 4);
        const std::vector<float> scale = drawn_floats(s.C, seed * 7 + 2, -1.5f, 1.5f);
        const std::vector<float> bias = drawn_floats(s.C, seed * 7 + 3, -0.5f, 0.5f);
        const cuda::ConvKey k = key_of(s, cuda::ConvKind::backward_filter, t, true, fu);
        const cuda::ConvPlan* plan = cuda::conv_fused_plan(k);
        REQUIRE_MESSAGE(plan, "no fused plan for ", k.str());
        const Tensor x = to_gpu(x64, t, cl), dy = to_gpu(dy64, t, cl), dw = poisoned({s.O, s.C, s.K, s.K}, t, cl);
        const Tensor sc = Tensor::from_vector(scale, {s.C}).to(gpu()), bi = Tensor::from_vector(bias, {s.C}).to(gpu());
        const Tensor ws =
            Tensor::empty({int64_t(std::max<size_t>(cuda::conv_workspace_bytes(*plan), 1))}, DType::u8, gpu());
        cuda::ConvFusedArgs f;
        f.scale = sc.raw_data(), f.bias = bi.raw_data();
        const auto st = static_cast<cudaStream_t>(Stream::current(gpu()).handle());
        cuda::conv_execute(*plan, x.raw_data(), dw.raw_data(), dy.raw_data(), ws.raw_data(), st, f);

        const Tensor xp = prologue_ref(to_ref(x64, t, cl), scale, bias, relu, t);
        Tensor w = to_ref(w64, t, cl);
        w.set_requires_grad(true);
        conv2d(xp, w, Tensor(), Conv2dParams::make(int(s.stride), int(s.pad))).backward(to_ref(dy64, t, cl));
        check_on_gpu(dw, w.grad(), gpu_tol_for(t), what + " dw", std::sqrt(double(s.N * HO * WO)));
      }
    }
}

TEST_CASE("which fused keys have a plan: the tiers of Note [Conv numerics] decide, the caller falls back") {
  if (!have_gpu("fused convolution plans")) return;
  const Shape4 s{2, 8, 5, 5, 8, 3, 1, 1};
  const Fusion all = kForwardFusions[0];
  CHECK(cuda::conv_fused_plan(key_of(s, cuda::ConvKind::forward, DType::bf16, true, all)) != nullptr);
  // The runtime-fusion engines are tensor-core engines: f32 only with TF32 allowed, and NHWC only.
  cuda::ConvKey f32 = key_of(s, cuda::ConvKind::forward, DType::f32, true, all);
  CHECK(cuda::conv_fused_plan(f32) == nullptr);
  CHECK(cuda::conv_fused_plan(f32) == nullptr);  // asked again: the cached answer
  f32.allow_tf32 = true;
  CHECK(cuda::conv_fused_plan(f32) != nullptr);
  CHECK(cuda::conv_fused_plan(key_of(s, cuda::ConvKind::forward, DType::bf16, false, all)) == nullptr);
  // conv_plan of a fused key no engine runs throws, naming the key.
  try {
    (void)cuda::conv_plan(key_of(s, cuda::ConvKind::forward, DType::bf16, false, all));
    FAIL("conv_plan of a fused NCHW key did not throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("+scale_bias_relu +genstats") != std::string::npos);
  }
}

TEST_CASE("fused keys: what cannot be fused is refused, naming why (runs without a GPU)") {
  const Shape4 s{2, 8, 5, 5, 8, 3, 1, 1};
  auto refused = [&](cuda::ConvKey k, const char* why) {
    try {
      (void)cuda::conv_fused_plan(k);
      FAIL("no error for ", k.str());
    } catch (const Error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(why) != std::string::npos, e.what());
    }
  };
  refused(key_of(s, cuda::ConvKind::backward_data, DType::bf16, true, {true, true, false, ""}), "backward_data writes");
  refused(key_of(s, cuda::ConvKind::backward_filter, DType::bf16, true, {false, false, true, ""}), "forward's y");
  refused(key_of(s, cuda::ConvKind::forward, DType::bf16, true, {false, true, true, ""}), "without the prologue");
  refused(key_of(s, cuda::ConvKind::forward, DType::bf16, true, {false, false, false, ""}), "has no fusion");
  cuda::ConvKey grouped = key_of(s, cuda::ConvKind::forward, DType::bf16, true, kForwardFusions[0]);
  grouped.groups = 2;
  refused(grouped, "not grouped");
}

}  // namespace
}  // namespace rt
