// GPU-vs-CPU checks at full size: the other GPU tests use small shapes, these the sizes a
// ResNet50 batch-256 step really launches, where grid-stride loops wrap several times, block
// counts hit their caps and per-channel reductions run over a million rows:
//   elementwise add/relu/add_relu and a cast f32 -> bf16 -> f32 at 2^25 + 3 elements,
//   NCHW <-> NHWC relayout of [256, 64, 64, 64] (2^26 elements),
//   max_pool2d 3x3/2 pad 1 on [80, 64, 112, 112] (N*H*W = 1,003,520 rows), forward + backward,
//   global_avg_pool on [256, 2048, 8, 8] (2^25), forward + backward, both layouts,
//   batch_norm training forward + backward on [256, 64, 64, 64], NCHW and NHWC (NHWC: 2^20
//   rows x 64 channels).
// f32 only: the tolerances of tests/cuda/cuda_test_util.h (sums scaled by sqrt(terms)) then
// say what the small tests say; bf16/f16 and odd shapes are the small tests' job.
// Inputs are drawn on the GPU (engine/random.h: the same values the CPU would draw) and copied
// to the CPU for the reference, so the host draws nothing; each check is one or two ops and
// prints its time, to keep the whole binary well under a minute on a 16-core GPU machine.
// Emulated (cuda_test::kEmulatedGpu) the batches are 16x smaller and the elementwise checks
// run at 65535 x 256 + 5 elements, still one past a full grid, so every kernel's block caps
// and grid-stride wraps are still crossed. Without a GPU every test prints a SKIPPED line.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "engine/ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;
// Odd: the vector kernels' scalar tail runs too. Emulated: one element past a full grid.
constexpr int64_t kBig = kEmulatedGpu ? 65535LL * 256 + 5 : (int64_t(1) << 25) + 3;
// A ResNet50 batch-256 shape, 16x smaller in batch when emulated.
Shape batch(Shape s) {
  if (kEmulatedGpu) s[0] = std::max<int64_t>(1, s[0] / 16);
  return s;
}

// Prints how long a check took (the GPU machine's log keeps it).
class Timer {
 public:
  explicit Timer(std::string what) : what_(std::move(what)), t0_(std::chrono::steady_clock::now()) {}
  ~Timer() {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    std::printf("large: %s: %.1f s\n", what_.c_str(), s);
  }

 private:
  std::string what_;
  std::chrono::steady_clock::time_point t0_;
};

// Normal values drawn on the GPU in f32 and `f`; .second is the CPU copy (the same values).
struct Pair {
  Tensor dev, ref;
};
Pair draw(const Shape& s, uint64_t seed, MemoryFormat f = kNCHW) {
  Generator g(seed);
  Pair p;
  p.dev = randn(s, g, DType::f32, gpu(), f);
  p.ref = p.dev.to(Device::cpu());
  return p;
}

Pair draw_grad(const Shape& s, uint64_t seed, MemoryFormat f = kNCHW) {
  Pair p = draw(s, seed, f);
  p.dev.set_requires_grad(true);
  p.ref.set_requires_grad(true);
  return p;
}

// By hand, every case here: full-size inputs drawn on the GPU in f32 (the harness draws f64 on
// the host, too slow at these sizes), one op each and timed.
TEST_CASE("large: add, relu and add_relu at 2^25 + 3 elements") {
  if (!have_gpu("large: add, relu and add_relu at 2^25 + 3 elements")) return;
  const Timer timer("add, relu, add_relu [" + std::to_string(kBig) + "]");
  const Pair a = draw({kBig}, 1), b = draw({kBig}, 2);
  poison_allocator(kBig);
  check_on_gpu(add(a.dev, b.dev), add(a.ref, b.ref), kGpuTolF32, label("add", DType::f32, {kBig}));
  check_on_gpu(relu(a.dev), relu(a.ref), kGpuTolF32, label("relu", DType::f32, {kBig}));
  check_on_gpu(add_relu(a.dev, b.dev), add_relu(a.ref, b.ref), kGpuTolF32, label("add_relu", DType::f32, {kBig}));
}

TEST_CASE("large: cast f32 -> bf16 -> f32 at 2^25 + 3 elements, exactly as the host rounds") {
  if (!have_gpu("large: cast f32 -> bf16 -> f32 at 2^25 + 3 elements")) return;
  const Timer timer("cast f32 -> bf16 -> f32 [" + std::to_string(kBig) + "]");
  Pair a = draw({kBig}, 3);
  a.dev = mul(a.dev, 100.0);  // magnitudes up to ~500: several binades
  a.ref = a.dev.to(Device::cpu());
  poison_allocator(kBig);
  const Tensor there = a.dev.to(DType::bf16);
  CHECK(there.dtype() == DType::bf16);
  check_on_gpu(there.to(DType::f32), a.ref.to(DType::bf16).to(DType::f32), kExact, "cast f32->bf16->f32");
}

TEST_CASE("large: NCHW <-> NHWC relayout of [256, 64, 64, 64], bit for bit") {
  if (!have_gpu("large: NCHW <-> NHWC relayout of [256, 64, 64, 64]")) return;
  const Shape s = batch({256, 64, 64, 64});
  for (MemoryFormat from : {kNCHW, kNHWC}) {
    const MemoryFormat to = from == kNCHW ? kNHWC : kNCHW;
    const Timer timer(std::string("relayout ") + format_name(from) + " -> " + format_name(to) + " " + shape_str(s));
    const Pair x = draw(s, from == kNCHW ? 4 : 5, from);
    poison_allocator(shape_numel(s));
    const Tensor got = x.dev.to(to);
    REQUIRE(got.format() == to);
    check_on_gpu(got, x.ref.to(to), kExact, label("relayout", DType::f32, s, from));
  }
}

TEST_CASE("large: max_pool2d 3x3/2 pad 1 on [80, 64, 112, 112] NHWC, forward and backward") {
  if (!have_gpu("large: max_pool2d 3x3/2 pad 1 on [80, 64, 112, 112]")) return;
  const Shape s = batch({80, 64, 112, 112});  // N*H*W = 1,003,520 rows of 64 channels; 64.2M elements
  const Timer timer("max_pool2d 3x3/2 " + shape_str(s) + " NHWC");
  const Pool2dParams p = Pool2dParams::make(3, 2, 1);
  const Pair x = draw_grad(s, 6, kNHWC);
  poison_allocator(shape_numel(s));
  const Tensor yd = max_pool2d(x.dev, p), yr = max_pool2d(x.ref, p);
  CHECK(yd.format() == kNHWC);
  check_on_gpu(yd, yr, kGpuTolF32, label("max_pool2d", DType::f32, s, kNHWC) + " y");
  const Pair g = draw(yr.shape(), 7, kNHWC);
  poison_allocator(shape_numel(s));
  yd.backward(g.dev);
  yr.backward(g.ref);
  check_on_gpu(x.dev.grad(), x.ref.grad(), kGpuTolF32, label("max_pool2d", DType::f32, s, kNHWC) + " dx");
}

TEST_CASE("large: global_avg_pool on [256, 2048, 8, 8], both layouts, forward and backward") {
  if (!have_gpu("large: global_avg_pool on [256, 2048, 8, 8]")) return;
  const Shape s = batch({256, 2048, 8, 8});  // 2^25 elements; ResNet50's last feature map has 7x7
  for (MemoryFormat f : {kNCHW, kNHWC}) {
    const std::string what = label("global_avg_pool", DType::f32, s, f);
    const Timer timer(what);
    const Pair x = draw_grad(s, f == kNCHW ? 8 : 9, f);
    poison_allocator(shape_numel(s));
    const Tensor yd = global_avg_pool(x.dev), yr = global_avg_pool(x.ref);
    check_on_gpu(yd, yr, kGpuTolF32, what + " y", std::sqrt(64.0));  // a sum of 64 terms
    const Pair g = draw(yr.shape(), 10);
    poison_allocator(shape_numel(s));
    yd.backward(g.dev);
    yr.backward(g.ref);
    check_on_gpu(x.dev.grad(), x.ref.grad(), kGpuTolF32, what + " dx");
  }
}

TEST_CASE("large: batch_norm training forward and backward on [256, 64, 64, 64], both layouts") {
  if (!have_gpu("large: batch_norm on [256, 64, 64, 64]")) return;
  const Shape s = batch({256, 64, 64, 64});  // NHWC: 2^20 rows x 64 channels; NCHW: 256 x 64 planes of 4096
  const int64_t C = s[1], M = shape_numel(s) / C;
  for (MemoryFormat f : {kNHWC, kNCHW}) {
    const std::string what = label("batch_norm train affine", DType::f32, s, f);
    const Timer timer(what);
    Pair x = draw(s, f == kNCHW ? 11 : 12, f);
    x.dev = add(mul(x.dev, 2.0), -1.0);  // mean -1, variance 4 per channel
    x.ref = x.dev.to(Device::cpu());
    x.dev.set_requires_grad(true);
    x.ref.set_requires_grad(true);
    const Pair w = draw_grad({C}, 13), b = draw_grad({C}, 14);
    Tensor rmd = Tensor::zeros({C}, DType::f32, gpu()), rvd = Tensor::full({C}, 1.0, DType::f32, gpu());
    Tensor rmr = Tensor::zeros({C}, DType::f32), rvr = Tensor::full({C}, 1.0, DType::f32);
    poison_allocator(shape_numel(s));
    const Tensor yd = batch_norm(x.dev, w.dev, b.dev, rmd, rvd, true, 0.1, 1e-5);
    const Tensor yr = batch_norm(x.ref, w.ref, b.ref, rmr, rvr, true, 0.1, 1e-5);
    CHECK(yd.format() == f);
    check_on_gpu(yd, yr, kGpuTolF32, what + " y");
    check_on_gpu(rmd, rmr, kGpuTolF32, what + " running_mean");
    check_on_gpu(rvd, rvr, kGpuTolF32, what + " running_var");
    const Pair g = draw(s, 15, f);
    poison_allocator(shape_numel(s));
    yd.backward(g.dev);
    yr.backward(g.ref);
    check_on_gpu(x.dev.grad(), x.ref.grad(), kGpuTolF32, what + " dx");
    // Sums over M = 2^20 rows: errors grow like sqrt(M).
    check_on_gpu(w.dev.grad(), w.ref.grad(), kGpuTolF32, what + " dweight", std::sqrt(double(M)));
    check_on_gpu(b.dev.grad(), b.ref.grad(), kGpuTolF32, what + " dbias", std::sqrt(double(M)));
    // Deterministic (Note [Two-stage channel reduction]): a second run gives the same bits.
    Tensor rm2 = Tensor::zeros({C}, DType::f32, gpu()), rv2 = Tensor::full({C}, 1.0, DType::f32, gpu());
    const Tensor w2 = w.dev.detach().set_requires_grad(true);
    batch_norm(x.dev.detach(), w2, b.dev.detach(), rm2, rv2, true, 0.1, 1e-5).backward(g.dev);
    CHECK_MESSAGE(rm2.to_vector<float>() == rmd.to_vector<float>(), what, " running_mean bits differ run to run");
    CHECK_MESSAGE(rv2.to_vector<float>() == rvd.to_vector<float>(), what, " running_var bits differ run to run");
    CHECK_MESSAGE(w2.grad().to_vector<float>() == w.dev.grad().to_vector<float>(), what,
                  " dweight bits differ run to run");
  }
}

}  // namespace
}  // namespace rt
