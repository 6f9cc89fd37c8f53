// GPU-vs-CPU tests of conv2d on CUDA (cuDNN backend API): the shapes of tests/conv2d_test.cc,
// NCHW and NHWC, f32/bf16/f16 (and f64 where cuDNN has an engine), forward and every
// gradient through autograd, outputs allocated from a NaN-poisoned allocator; then the plan
// cache. Without a GPU every GPU test prints a SKIPPED line and passes; the host-side checks
// (plan-cache keys, pointer alignment) still run.
#include <cmath>
#include <unordered_set>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "engine/stream.h"
#include "kernels/cuda/conv2d.h"
#include "tests/conv2d_cases.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

using Case = test::ConvCase;

// The harness adds the dtype and the input shapes and formats.
std::string case_name(const Case& k) {
  return "conv2d s" + std::to_string(k.p.stride_h) + "," + std::to_string(k.p.stride_w) + " p" +
         std::to_string(k.p.pad_h) + "," + std::to_string(k.p.pad_w) + " d" + std::to_string(k.p.dilation_h) + "," +
         std::to_string(k.p.dilation_w) + " g" + std::to_string(k.p.groups);
}

// conv2d on x (k's shape, format f), the weight (format f) and the bias (if k has one),
// forward and every gradient, through the harness. `loosen` widens the dtype's tolerance (1
// unless the caller says why).
void check_case(const Case& k, DType t, MemoryFormat f, uint64_t seed, double loosen = 1) {
  const int64_t HO = cuda::conv_out_size(k.H, k.KH, k.p.stride_h, k.p.pad_h, k.p.dilation_h);
  const int64_t WO = cuda::conv_out_size(k.W, k.KW, k.p.stride_w, k.p.pad_w, k.p.dilation_w);
  std::vector<Shape> shapes = {{k.N, k.C, k.H, k.W}, {k.O, k.C / k.p.groups, k.KH, k.KW}};
  if (k.bias) shapes.push_back({k.O});
  const Conv2dParams p = k.p;
  const OpFn op = [p](const std::vector<Tensor>& in) {
    const Tensor y = conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), p);
    CHECK_MESSAGE(y.format() == in[0].format(), "conv2d: y not in x's format");
    return y;
  };
  // Each output is a sum: y over C/g*KH*KW products, dx over about O/g*KH*KW/stride^2,
  // dw and db over N*HO*WO; scale the absolute tolerance by the root of the term count.
  const double ky = std::sqrt(double(k.C / k.p.groups * k.KH * k.KW));
  const double kx = std::sqrt(double(k.O / k.p.groups * k.KH * k.KW));
  const double kw = std::sqrt(double(k.N * HO * WO));
  // The harness checks dx's and dw's formats against the CPU's, which are x's and the weight's
  // (tests/conv2d_test.cc).
  check_matches_cpu(case_name(k), op, shapes, {t},
                    MatchOptions()
                        .with_formats({f, f})
                        .with_seed(seed)
                        .widened(loosen)
                        .with_forward_scale([ky](const Tensor&, const std::vector<Tensor>&) { return ky; })
                        .with_grad_scale([kx, kw](size_t i, const Tensor&, const Tensor&) { return i ? kw : kx; }));
}

// cuDNN's benchmark mode for a scope, off again however the scope ends.
struct BenchmarkOn {
  BenchmarkOn() { cuda::set_cudnn_benchmark(true); }
  ~BenchmarkOn() { cuda::set_cudnn_benchmark(false); }
  BenchmarkOn(const BenchmarkOn&) = delete;
  BenchmarkOn& operator=(const BenchmarkOn&) = delete;
};

TEST_CASE("conv plan keys tell every parameter apart (runs without a GPU)") {
  cuda::ConvKey a;
  a.N = 2, a.C = 6, a.H = 5, a.W = 7, a.O = 4, a.KH = 3, a.KW = 3, a.ph = 1, a.pw = 1, a.groups = 2;
  std::vector<cuda::ConvKey> keys = {a};
  auto vary = [&](auto&& f) {
    cuda::ConvKey k = a;
    f(k);
    keys.push_back(k);
  };
  vary([](auto& k) { k.kind = cuda::ConvKind::backward_data; });
  vary([](auto& k) { k.kind = cuda::ConvKind::backward_filter; });
  vary([](auto& k) { k.N = 3; });
  vary([](auto& k) { k.C = 8; });
  vary([](auto& k) { k.H = 6; });
  vary([](auto& k) { k.W = 6; });
  vary([](auto& k) { k.O = 6; });
  vary([](auto& k) { k.KH = 1; });
  vary([](auto& k) { k.KW = 1; });
  vary([](auto& k) { k.sh = 2; });
  vary([](auto& k) { k.sw = 2; });
  vary([](auto& k) { k.ph = 0; });
  vary([](auto& k) { k.pw = 0; });
  vary([](auto& k) { k.dh = 2; });
  vary([](auto& k) { k.dw = 2; });
  vary([](auto& k) { k.groups = 1; });
  vary([](auto& k) { k.dtype = DType::bf16; });
  vary([](auto& k) { k.nhwc = true; });
  vary([](auto& k) { k.align = 4; });
  vary([](auto& k) { k.allow_tf32 = true; });
  vary([](auto& k) { k.benchmark = true; });
  vary([](auto& k) { k.accumulate = true; });
  vary([](auto& k) { k.prologue = true; });
  vary([](auto& k) { k.prologue = k.prologue_relu = true; });
  vary([](auto& k) { k.genstats = true; });
  vary([](auto& k) { k.device = 1; });
  std::unordered_set<size_t> hashes;
  for (size_t i = 0; i < keys.size(); ++i) {
    hashes.insert(cuda::ConvKeyHash{}(keys[i]));
    for (size_t j = 0; j < keys.size(); ++j) CHECK_MESSAGE((keys[i] == keys[j]) == (i == j), keys[i].str());
  }
  CHECK(hashes.size() == keys.size());  // no collisions among these (not required, but expected)
  cuda::ConvKey copy = a;
  CHECK(copy == a);
  CHECK(cuda::ConvKeyHash{}(copy) == cuda::ConvKeyHash{}(a));
  CHECK(a.str().find("forward f32 NCHW x(2, 6, 5, 7) w(4, 3, 3, 3)") != std::string::npos);
  CHECK(a.str().find("groups 2") != std::string::npos);
}

TEST_CASE("pointer alignment and output sizes (runs without a GPU)") {
  alignas(64) static char buf[64];
  CHECK(cuda::pointer_alignment({buf}) == 16);
  CHECK(cuda::pointer_alignment({buf, buf + 4}) == 4);
  CHECK(cuda::pointer_alignment({buf + 2, buf + 32}) == 2);
  CHECK(cuda::pointer_alignment({nullptr, buf + 8}) == 8);
  CHECK(cuda::conv_out_size(7, 3, 1, 1, 1) == 7);
  CHECK(cuda::conv_out_size(11, 7, 2, 3, 1) == 6);
  CHECK(cuda::conv_out_size(9, 3, 1, 2, 2) == 9);
  CHECK_FALSE(cuda::cudnn_allow_tf32());  // off by default: f32 results match the CPU backend
  CHECK_FALSE(cuda::cudnn_benchmark());
  CHECK_FALSE(cuda::cudnn_benchmark_runtime_compiled());
}

TEST_CASE("conv2d on CUDA matches the CPU: forward and gradients, both layouts, f32/bf16/f16") {
  if (!have_gpu("conv2d on CUDA matches the CPU")) return;
  uint64_t seed = 100;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last})
      for (const Case& k : test::conv_cases()) check_case(k, t, f, seed += 10);
}

TEST_CASE("conv2d on CUDA in f64: matches the CPU, or says clearly that cuDNN has no engine") {
  if (!have_gpu("conv2d on CUDA in f64")) return;
  uint64_t seed = 900;
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last})
    for (const Case& k : test::conv_cases()) {
      try {
        check_case(k, DType::f64, f, seed += 10);
      } catch (const Error& e) {
        const std::string msg = e.what();
        CHECK_MESSAGE(msg.find("no usable engine") != std::string::npos, msg);
        CHECK_MESSAGE(msg.find("convert to f32") != std::string::npos, msg);
      }
    }
}

TEST_CASE("conv2d with a weight in the other layout than x") {
  if (!have_gpu("conv2d with a weight in the other layout than x")) return;
  const Case k = test::conv_cases()[6];  // groups 2, bias
  const Conv2dParams p = k.p;
  const OpFn op = [p](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], Tensor(), p); };
  const double ky = 3.0 * std::sqrt(double(k.C / k.p.groups)), kx = std::sqrt(double(k.O / k.p.groups * k.KH * k.KW));
  const double kw = std::sqrt(double(k.N * k.H * k.W));
  for (MemoryFormat xf : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    const MemoryFormat wf = xf == MemoryFormat::contiguous ? MemoryFormat::channels_last : MemoryFormat::contiguous;
    // dw in the weight's format wf: the harness checks it against the CPU's (tests/conv2d_test.cc).
    check_matches_cpu("conv2d mixed layout", op,
                      {{k.N, k.C, k.H, k.W}, {k.O, k.C / k.p.groups, k.KH, k.KW}}, {DType::f32},
                      MatchOptions()
                          .with_formats({xf, wf})
                          .with_seed(7)
                          .with_forward_scale([ky](const Tensor&, const std::vector<Tensor>&) { return ky; })
                          .with_grad_scale([kx, kw](size_t i, const Tensor&, const Tensor&) { return i ? kw : kx; }));
  }
}

TEST_CASE("conv2d in benchmark mode: the fastest plan still matches the CPU") {
  if (!have_gpu("conv2d in benchmark mode")) return;
  const cuda::ConvCacheStats before = cuda::conv_cache_stats();
  {
    const BenchmarkOn on;
    uint64_t seed = 500;
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last})
      for (int i : {0, 4, 6}) check_case(test::conv_cases()[i], DType::f32, f, seed += 10);
  }
  CHECK(cuda::conv_cache_stats().misses > before.misses);  // benchmarked plans are keyed apart
}

// Odd channel counts in NHWC may have no strict 16-bit engine; the relaxed tier then gives
// one (Note [Conv numerics]) instead of "no usable engine", once per key on stderr.
TEST_CASE("conv2d in bf16/f16 NHWC with odd channels plans and matches the CPU") {
  if (!have_gpu("conv2d in bf16/f16 NHWC with odd channels")) return;
  const Case k{2, 3, 6, 5, 5, 3, 3, Conv2dParams::make(1, 1), true};
  // A relaxed-tier engine may sum in bf16/f16: a rounding per addition instead of one at
  // the end. Over dw's 60 terms that random walk reaches about 2x the usual tolerance (f16)
  // and 1.5x (bf16); 4x leaves room.
  const double loosen = 4;
  uint64_t seed = 700;
  for (DType t : {DType::bf16, DType::f16}) check_case(k, t, MemoryFormat::channels_last, seed += 10, loosen);
  const BenchmarkOn on;  // the same through the benchmarking path (other keys)
  for (DType t : {DType::bf16, DType::f16}) check_case(k, t, MemoryFormat::channels_last, seed += 10, loosen);
}

// Note [Gradients accumulated in place] in engine/autograd.h: h feeds a convolution
// (recorded first, so its backward runs last) and a scale; the convolution's input gradient
// is added by cuDNN (beta = 1) into the scale's, no separate add. Both ways match the CPU's
// f64 result on the same values within the dtype's tolerance (the in-place sum rounds once,
// the out-of-place one twice), and the weight gradient is the same bits.
// By hand: it compares two GPU runs (in place, out of place) and counts their adds, which
// one harness call, a GPU run against a CPU run, cannot.
TEST_CASE("conv2d adds its input gradient into an earlier one in place, as the out-of-place sum") {
  if (!have_gpu("conv2d adds its input gradient into an earlier one in place, as the out-of-place sum")) return;
  const Case k{2, 6, 7, 5, 8, 3, 3, Conv2dParams::make(1, 1), false};
  uint64_t seed = 900;
  struct Out {
    Tensor dx, dw;
    int adds;  // out-of-place gradient sums during backward
  };
  // The inputs: f64 values representable in t, on device d in t and format f.
  auto run = [&](const std::vector<Tensor>& v64, Device d, DType t, MemoryFormat f, bool in_place) {
    set_accumulate_in_place(in_place);
    auto in = [&](const Tensor& v) { return v.to(t).to(f).to(d).clone(); };  // a leaf of this run's own
    Tensor x = in(v64[0]), w = in(v64[1]);
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    const Tensor h = mul(x, 2.0);
    const Tensor a = conv2d(h, w, Tensor(), k.p);
    const Tensor b = mul(h, 3.0);
    const Tensor loss = add(sum(mul(a, in(v64[2]))), sum(mul(b, in(v64[3]))));
    prof::start();
    loss.backward();
    int adds = 0;
    for (const prof::Event& e : prof::stop())
      if (e.kind == prof::EventKind::op && !e.backward && e.name == "add") ++adds;
    set_accumulate_in_place(true);
    return Out{x.grad(), w.grad(), adds};
  };
  for (DType t : {DType::f32, DType::bf16})
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      std::vector<Tensor> v64;
      for (const Shape& s : {Shape{k.N, k.C, k.H, k.W}, Shape{k.O, k.C, k.KH, k.KW}, Shape{k.N, k.O, 7, 5},
                             Shape{k.N, k.C, k.H, k.W}})
        v64.push_back(rnd(s, ++seed).to(t).to(DType::f64));
      const Out fused = run(v64, gpu(), t, f, true), plain = run(v64, gpu(), t, f, false);
      const Out ref = run(v64, Device::cpu(), DType::f64, MemoryFormat::contiguous, false);
      const std::string what = label("conv2d accumulate", t, {k.N, k.C, k.H, k.W}, f);
      CHECK_MESSAGE(fused.adds == 0, what);
      CHECK_MESSAGE(plain.adds == 1, what);
      if (t == DType::f32) {
        check_on_gpu(fused.dx, ref.dx, gpu_tol_for(t), what + " dx in place");
        check_on_gpu(plain.dx, ref.dx, gpu_tol_for(t), what + " dx out of place");
      } else {
        // bf16 rounds the scale's gradient, the convolution's and the sum (the in-place sum
        // skips one), and the two terms can cancel: each element against its terms'
        // magnitudes (kTermsTolBF16, Note [Tolerances]), the two terms computed apart in f64
        // (dx is linear in the seeds: ga alone gives the convolution's term, gb alone the scale's).
        std::vector<Tensor> only_a = v64, only_b = v64;
        only_a[3] = mul(v64[3], 0.0);
        only_b[2] = mul(v64[2], 0.0);
        const std::vector<double> ta = run(only_a, Device::cpu(), DType::f64, MemoryFormat::contiguous, false)
                                           .dx.to_vector<double>(),
                                  tb = run(only_b, Device::cpu(), DType::f64, MemoryFormat::contiguous, false)
                                           .dx.to_vector<double>(),
                                  want = ref.dx.to_vector<double>();
        for (const auto& [got_t, how] :
             {std::pair<Tensor, std::string>{fused.dx, "in place"}, {plain.dx, "out of place"}}) {
          CHECK(got_t.device() == gpu());
          const std::vector<double> got = got_t.to(MemoryFormat::contiguous).to_vector<double>();
          int bad = 0;
          for (size_t i = 0; i < want.size(); ++i)
            if (!test::kTermsTolBF16.holds(got[i], want[i], std::abs(ta[i]) + std::abs(tb[i]))) ++bad;
          CHECK_MESSAGE(bad == 0, what, " dx ", how, ": ", bad, " elements beyond 3 roundings of their terms");
        }
      }
      CHECK_MESSAGE(fused.dw.to_vector<double>() == plain.dw.to_vector<double>(), what, " dw");
    }
}

// By hand: the plan cache's counters and bit-equal reruns, no CPU comparison.
TEST_CASE("conv2d plans are built once per key and then reused") {
  if (!have_gpu("conv2d plans are built once per key and then reused")) return;
  const Case k{2, 8, 9, 9, 16, 3, 3, Conv2dParams::make(1, 1), false};
  const Tensor x = to_gpu(rnd({k.N, k.C, k.H, k.W}, 11), DType::f32);
  const Tensor w = to_gpu(rnd({k.O, k.C, k.KH, k.KW}, 12), DType::f32);
  const Tensor y1 = conv2d(x, w, Tensor(), k.p);  // builds (or finds) the forward plan
  const cuda::ConvCacheStats before = cuda::conv_cache_stats();
  const Tensor y2 = conv2d(x, w, Tensor(), k.p);
  const cuda::ConvCacheStats after = cuda::conv_cache_stats();
  CHECK(after.hits == before.hits + 1);
  CHECK(after.misses == before.misses);
  CHECK(after.size == before.size);
  // The same plan gives the same bits (deterministic engines, Note [Conv numerics]).
  CHECK(y1.to_vector<double>() == y2.to_vector<double>());
  // A new shape is a miss, and then a hit.
  const Tensor x2 = to_gpu(rnd({k.N + 1, k.C, k.H, k.W}, 13), DType::f32);
  (void)conv2d(x2, w, Tensor(), k.p);
  const cuda::ConvCacheStats third = cuda::conv_cache_stats();
  CHECK(third.misses == after.misses + 1);
  (void)conv2d(x2, w, Tensor(), k.p);
  CHECK(cuda::conv_cache_stats().hits == third.hits + 1);
}

}  // namespace
}  // namespace rt
