// Bandwidth of ringtape's memory-bound CUDA kernels at the shapes of a ResNet50 training step
// (batch 256, 224x224; bf16 activations in channels-last; f32 master weights), measured
// against the device's own copy bandwidth. These kernels do a few operations per byte, so
// bytes per second is their measure (METHOD.md's "two numbers": here the byte floor).
//
// - Copy ceiling: a 1 GiB device-to-device cudaMemcpyAsync, bytes read + written counted,
//   best of 10 after 2 warm-ups.
// - Each row: "min MB" is the fewest bytes the op must move through device memory (every
//   input read once, every output written once; the formula is next to each case below),
//   "GB/s" = min bytes / median time, "% copy" = GB/s over the copy's. Target: 80%.
//   Where the algorithm must read an input twice (a reduction before an elementwise pass over
//   a tensor far larger than L2), the note gives the ceiling that implies; a row under 80%
//   but near its ceiling needs a different algorithm (fusion), not a faster kernel.
// - Timing: CUDA events on the current stream around `reps` back-to-back calls after 3
//   warm-up calls; `reps` makes one trial last about --trial-ms; the row is the median of
//   --trials trials. Inputs are random, never zeros (zeros can hide unwritten outputs and run
//   faster). When one call's operands are under 4x the L2 cache, several input/output sets
//   are rotated ("sets" column), so that the time is memory's, not the cache's.
// - Ops are called through the public API (engine/ops.h, Tensor::to) where one exists, so
//   the caching allocator's per-call work is included, as in training; backward kernels,
//   batch-norm's halves and the fused optimizer through their launchers (kernels/cuda/*.cuh),
//   on preallocated outputs.
// - Correctness is the tests' job (tests/cuda/*_cuda_test.cc); tools/gpu_check.sh runs them
//   before this benchmark.
//
//   bazel run //bench:cuda_kernel_bench -- [--json PATH] [--only SUBSTR] [--trials N]
//       [--trial-ms MS] [--quick]
// Without a GPU: prints "SKIPPED: no CUDA device (...)" and exits 0. Exit 1 when a case
// failed (an rt::Error from an op or a CUDA call); missing the 80% target is not a failure.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/usage_error.h"
#include "bench/bench_util.h"
#include "cli/flags.h"
#include "engine/autograd.h"
#include "engine/io/json.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/stream.h"
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/pool.h"
#include "kernels/cuda/runtime.h"
#include "models/registry.h"
#include "profile/peaks.h"

namespace {

using namespace rt;

constexpr double kTargetPct = 80.0;
constexpr MemoryFormat kNHWC = MemoryFormat::channels_last, kNCHW = MemoryFormat::contiguous;

// ResNet50, batch 256, 224x224 (torchvision v1.5; the 50 layers' largest and smallest maps).
const Shape kAct = {256, 256, 56, 56};    // layer1's block output (256 channels at 56x56): 205.5M values
const Shape kDeep = {256, 2048, 7, 7};    // layer4's block output: 25.7M values
const Shape kStem = {256, 64, 112, 112};  // conv1's output, the max pool's input: 205.5M values
const Shape kPixels = {256, 224, 224, 3}; // a loader batch: u8 (N, H, W, C)
const Shape kInput = {256, 3, 224, 224};  // the normalised input
constexpr int64_t kClasses = 1000;

// From the command line; the defaults are flag_table()'s.
struct Options {
  std::string json, only;
  int trials = 0;
  double trial_ms = 0;
};

const char* kUsage = "usage: cuda_kernel_bench [--json PATH] [--only SUBSTR] [--trials N] [--trial-ms MS] [--quick]";

std::vector<cli::Flag> flag_table() {
  using cli::FlagType;
  using cli::Topic;
  return {
      {"json", FlagType::string, "", "also write the results as JSON to this file"},
      {"only", FlagType::string, "", "only the cases whose name contains this substring"},
      {"trials", FlagType::integer, "5", "timed trials per case; the row is their median", {}, Topic::output,
       bench::int_at_least(1)},
      {"trial-ms", FlagType::number, "3", "about how long one trial lasts, in milliseconds", {}, Topic::output,
       cli::Range{0, std::numeric_limits<double>::infinity(), true, "positive"}},
      {"quick", FlagType::boolean, "false", "fewer, shorter trials: --trials 3 --trial-ms 1.5 where not given"},
  };
}

Options parse(int argc, char** argv) {
  const cli::Flags f = bench::parse_flags(argc, argv, flag_table(), kUsage);
  const bool quick = f.boolean("quick");
  Options o;
  o.json = f.str("json");
  o.only = f.str("only");
  o.trials = quick && !f.given("trials") ? 3 : int(f.integer("trials"));
  o.trial_ms = quick && !f.given("trial-ms") ? 1.5 : f.number("trial-ms");
  return o;
}

Device gpu() { return Device::cuda(0); }
cudaStream_t stream() { return static_cast<cudaStream_t>(Stream::current(gpu()).handle()); }

int64_t g_l2_bytes = 50 << 20;  // read off the device in main()

// Input/output sets to rotate so that one pass over all of them is at least 4x the L2.
int sets_for(double bytes_per_call) {
  return std::clamp(int(std::ceil(4.0 * double(g_l2_bytes) / bytes_per_call)), 1, 32);
}

// Random contents without drawing every value on the host: kChunk values are drawn once
// (normal for floating types, uniform bytes for u8), copied to the device and tiled over the
// buffer with device-to-device copies. kChunk is odd, so the tiling does not line up with the
// channel count: every channel sees varied values.
constexpr int64_t kChunk = (int64_t(1) << 20) + 7;

void fill_random(const Tensor& t, uint64_t seed) {
  const int64_t m = std::min(t.numel(), kChunk);
  Generator g(seed);
  Tensor chunk;
  if (t.dtype() == DType::u8) {
    std::vector<uint8_t> v(static_cast<size_t>(m));
    for (auto& b : v) b = uint8_t(g.next_u64() >> 56);
    chunk = Tensor::from_vector<uint8_t>(v, {m});
  } else {
    chunk = randn({m}, g, DType::f64).to(t.dtype());
  }
  chunk = chunk.to(gpu());
  const size_t total = t.nbytes(), step = chunk.nbytes();
  char* dst = static_cast<char*>(t.raw_data());
  // `chunk` is freed to the cache of this stream: later allocations on it run after these copies.
  for (size_t off = 0; off < total; off += step)
    cuda::memcpy(dst + off, chunk.raw_data(), std::min(step, total - off), cuda::CopyKind::d2d, 0, stream());
}

Tensor random_gpu(const Shape& s, DType t, MemoryFormat f, uint64_t seed) {
  Tensor x = Tensor::empty(s, t, gpu(), s.size() == 4 ? f : kNCHW);
  fill_random(x, seed);
  return x;
}

double numel(const Shape& s) { return double(shape_numel(s)); }
double esize(DType t) { return double(dtype_size(t)); }

// One benchmark case: `call(i)` runs the op once on input set i % sets.
struct Case {
  std::string shape, dtype;
  double bytes = 0;  // minimum bytes per call (formula at the case)
  int sets = 1;
  std::string note;
  std::function<void(int)> call;
};

struct Row {
  std::string name, shape, dtype, note;
  double us = 0, bytes = 0, gbps = 0, pct = 0;
  int sets = 1, reps = 0;
  bool failed = false;
};

// Median per-call time in microseconds of `call`, timed as described at the top.
double time_us(const std::function<void(int)>& call, const Options& o, int* reps_out) {
  const Stream s = Stream::current(gpu());
  Event a(gpu()), b(gpu());
  for (int i = 0; i < 3; ++i) call(i);
  a.record(s);
  call(3);
  b.record(s);
  b.synchronize();
  const double one_ms = std::max<double>(a.elapsed_ms(b), 1e-3);
  const int reps = std::clamp(int(o.trial_ms / one_ms), 3, 2000);
  std::vector<double> per;
  for (int t = 0; t < o.trials; ++t) {
    a.record(s);
    for (int r = 0; r < reps; ++r) call(r);
    b.record(s);
    b.synchronize();
    per.push_back(1000.0 * double(a.elapsed_ms(b)) / reps);
  }
  std::sort(per.begin(), per.end());
  *reps_out = reps;
  return per[per.size() / 2];
}

// Device-to-device copy of 1 GiB: best of 10 after 2 warm-ups; GB/s counting read + write.
double copy_gbps() {
  const int64_t n = int64_t(1) << 30;
  const Tensor src = random_gpu({n}, DType::u8, kNCHW, 1);
  const Tensor dst = Tensor::empty({n}, DType::u8, gpu());
  const Stream s = Stream::current(gpu());
  Event a(gpu()), b(gpu());
  double best = 1e30;
  for (int i = 0; i < 12; ++i) {
    a.record(s);
    cuda::memcpy(dst.raw_data(), src.raw_data(), size_t(n), cuda::CopyKind::d2d, 0, stream());
    b.record(s);
    b.synchronize();
    if (i >= 2) best = std::min<double>(best, a.elapsed_ms(b));
  }
  return 2.0 * double(n) / (best * 1e-3) / 1e9;
}

std::vector<Tensor> random_sets(int k, const Shape& s, DType t, MemoryFormat f, uint64_t seed) {
  std::vector<Tensor> v;
  for (int i = 0; i < k; ++i) v.push_back(random_gpu(s, t, f, seed + uint64_t(i)));
  return v;
}
std::vector<Tensor> empty_sets(int k, const Shape& s, DType t, MemoryFormat f) {
  std::vector<Tensor> v;
  for (int i = 0; i < k; ++i) v.push_back(Tensor::empty(s, t, gpu(), s.size() == 4 ? f : kNCHW));
  return v;
}
template <typename T>
const T& pick(const std::vector<T>& v, int i) {
  return v[size_t(i) % v.size()];
}

// ---- the cases --------------------------------------------------------------------------
// Each builder allocates its operands, and the Case keeps them alive until it is destroyed.

Case elementwise_unary(DType t) {  // relu(x): read x, write y = 2 n e
  const double n = numel(kAct), bytes = 2 * n * esize(t);
  Case c{shape_str(kAct) + " NHWC", dtype_name(t), bytes, sets_for(bytes), "", nullptr};
  auto xs = random_sets(c.sets, kAct, t, kNHWC, 10);
  c.call = [xs](int i) { (void)relu(pick(xs, i)); };
  return c;
}

Case relu_backward(DType t) {  // dx = dy where y > 0: read y, dy, write dx = 3 n e
  const double n = numel(kAct), bytes = 3 * n * esize(t);
  Case c{shape_str(kAct) + " NHWC", dtype_name(t), bytes, sets_for(bytes), "", nullptr};
  std::vector<Tensor> ys, dys = random_sets(c.sets, kAct, t, kNHWC, 20), dxs = empty_sets(c.sets, kAct, t, kNHWC);
  for (const Tensor& x : random_sets(c.sets, kAct, t, kNHWC, 30)) ys.push_back(relu(x));  // half zeros, like training
  c.call = [ys, dys, dxs, t](int i) {
    cuda::relu_backward(t, pick(ys, i).numel(), pick(ys, i).raw_data(), pick(dys, i).raw_data(), pick(dxs, i).raw_data(),
                        stream());
  };
  return c;
}

Case binary_op(DType t, bool with_relu) {  // add / add_relu: read a, b, write y = 3 n e
  const double n = numel(kAct), bytes = 3 * n * esize(t);
  Case c{shape_str(kAct) + " NHWC", dtype_name(t), bytes, sets_for(bytes), "", nullptr};
  auto as = random_sets(c.sets, kAct, t, kNHWC, 40), bs = random_sets(c.sets, kAct, t, kNHWC, 50);
  c.call = [as, bs, with_relu](int i) {
    if (with_relu) (void)add_relu(pick(as, i), pick(bs, i));
    else (void)add(pick(as, i), pick(bs, i));
  };
  return c;
}

cuda::BatchNormGeom bn_geom(const Shape& s, MemoryFormat f) { return {s[0], s[1], s[2] * s[3], f == kNHWC}; }
std::string layout(MemoryFormat f) { return f == kNHWC ? " NHWC" : " NCHW"; }
Tensor bn_workspace(size_t bytes) { return Tensor::empty({int64_t(bytes)}, DType::u8, gpu()); }

// Statistics: read x once (n e; one pass, Welford states: batch_norm.h); write mean,
// invstd (f32, C each); read + write the f32 running mean and var: n e + 24 C. The
// partials of the two-stage reduction (channel_reduce.cuh) are a few KB.
Case bn_stats(const Shape& s, DType t, MemoryFormat f) {
  const int64_t C = s[1];
  const double bytes = numel(s) * esize(t) + 24.0 * double(C);
  Case c{shape_str(s) + layout(f), dtype_name(t), bytes, sets_for(bytes), "", nullptr};
  auto xs = random_sets(c.sets, s, t, f, 60);
  Tensor mean = Tensor::empty({C}, DType::f32, gpu()), invstd = Tensor::empty({C}, DType::f32, gpu());
  Tensor rm = Tensor::zeros({C}, DType::f32, gpu()), rv = Tensor::full({C}, 1.0, DType::f32, gpu());
  const cuda::BatchNormGeom g = bn_geom(s, f);
  Tensor work = bn_workspace(cuda::batch_norm_stats_workspace_bytes(g, t));
  c.call = [xs, mean, invstd, rm, rv, g, t, work](int i) {
    cuda::batch_norm_stats(g, t, pick(xs, i).raw_data(), 1e-5, mean.raw_data(), invstd.raw_data(), DType::f32,
                           rm.raw_data(), rv.raw_data(), 0.1, work.raw_data(), stream());
  };
  return c;
}

// y = (x - mean) * invstd * gamma + beta: read x, write y (2 n e), read mean, invstd, gamma,
// beta (f32: Note [Batch norm parameters in the statistics dtype]): 2 n e + 16 C.
Case bn_apply(const Shape& s, DType t) {
  const int64_t C = s[1];
  const double bytes = 2 * numel(s) * esize(t) + double(C) * 16;
  Case c{shape_str(s) + " NHWC", dtype_name(t), bytes, sets_for(bytes), "", nullptr};
  auto xs = random_sets(c.sets, s, t, kNHWC, 70);
  auto ys = empty_sets(c.sets, s, t, kNHWC);
  Tensor mean = random_gpu({C}, DType::f32, kNCHW, 71), invstd = Tensor::full({C}, 1.3, DType::f32, gpu());
  Tensor gamma = random_gpu({C}, DType::f32, kNCHW, 72), beta = random_gpu({C}, DType::f32, kNCHW, 73);
  const cuda::BatchNormGeom g = bn_geom(s, kNHWC);
  c.call = [xs, ys, mean, invstd, gamma, beta, g, t](int i) {
    cuda::batch_norm_apply(g, t, pick(xs, i).raw_data(), mean.raw_data(), invstd.raw_data(), gamma.raw_data(),
                           beta.raw_data(), pick(ys, i).raw_data(), stream());
  };
  return c;
}

// The training-mode op (statistics, running statistics, normalisation) through engine/ops.h:
// at least read x, write y: 2 n e (+ 24 C + C (2 e) for the statistics and parameters).
Case bn_forward_op(const Shape& s, DType t) {
  const int64_t C = s[1];
  const double bytes = 2 * numel(s) * esize(t) + double(C) * (24 + 2 * esize(t));
  Case c{shape_str(s) + " NHWC", dtype_name(t), bytes, sets_for(bytes),
         "stats then apply: x read twice (2 n e read + n e written): ceiling 67%",
         nullptr};
  auto xs = random_sets(c.sets, s, t, kNHWC, 80);
  Tensor gamma = random_gpu({C}, t, kNCHW, 81), beta = random_gpu({C}, t, kNCHW, 82);
  Tensor rm = Tensor::zeros({C}, DType::f32, gpu()), rv = Tensor::full({C}, 1.0, DType::f32, gpu());
  c.call = [xs, gamma, beta, rm, rv](int i) { (void)batch_norm(pick(xs, i), gamma, beta, rm, rv, true); };
  return c;
}

// Training backward: read x, dy, write dx (3 n e); read mean, invstd, gamma; write dgamma,
// dbeta (all f32): 3 n e + 20 C.
Case bn_backward(const Shape& s, DType t, MemoryFormat f) {
  const int64_t C = s[1];
  const double bytes = 3 * numel(s) * esize(t) + double(C) * 20;
  Case c{shape_str(s) + layout(f), dtype_name(t), bytes, sets_for(bytes),
         "reduction pass, then dx pass: x and dy read twice (5 n e): ceiling 60%", nullptr};
  auto xs = random_sets(c.sets, s, t, f, 90), dys = random_sets(c.sets, s, t, f, 91);
  auto dxs = empty_sets(c.sets, s, t, f);
  Tensor mean = random_gpu({C}, DType::f32, kNCHW, 92), invstd = Tensor::full({C}, 1.3, DType::f32, gpu());
  Tensor gamma = random_gpu({C}, DType::f32, kNCHW, 93);
  Tensor dgamma = Tensor::empty({C}, DType::f32, gpu()), dbeta = Tensor::empty({C}, DType::f32, gpu());
  const cuda::BatchNormGeom g = bn_geom(s, f);
  Tensor work = bn_workspace(cuda::batch_norm_backward_workspace_bytes(g, t));
  c.call = [xs, dys, dxs, mean, invstd, gamma, dgamma, dbeta, work, g, t](int i) {
    cuda::batch_norm_backward(g, t, pick(xs, i).raw_data(), pick(dys, i).raw_data(), mean.raw_data(),
                              invstd.raw_data(), gamma.raw_data(), true, pick(dxs, i).raw_data(), dgamma.raw_data(),
                              dbeta.raw_data(), work.raw_data(), stream());
  };
  return c;
}

// The backward's reduction alone (dx not wanted: dgamma, dbeta only): read x, dy (2 n e).
// The pass every backward runs before its dx pass; compare with bn stats.
Case bn_backward_reduce(const Shape& s, DType t, MemoryFormat f) {
  const int64_t C = s[1];
  const double bytes = 2 * numel(s) * esize(t) + double(C) * 20;
  Case c{shape_str(s) + layout(f), dtype_name(t), bytes, sets_for(bytes), "", nullptr};
  auto xs = random_sets(c.sets, s, t, f, 190), dys = random_sets(c.sets, s, t, f, 191);
  Tensor mean = random_gpu({C}, DType::f32, kNCHW, 192), invstd = Tensor::full({C}, 1.3, DType::f32, gpu());
  // In the statistics dtype (Note [Batch norm parameters in the statistics dtype]).
  Tensor gamma = random_gpu({C}, DType::f32, kNCHW, 193);
  Tensor dgamma = Tensor::empty({C}, DType::f32, gpu()), dbeta = Tensor::empty({C}, DType::f32, gpu());
  const cuda::BatchNormGeom g = bn_geom(s, f);
  Tensor work = bn_workspace(cuda::batch_norm_backward_workspace_bytes(g, t));
  c.call = [xs, dys, mean, invstd, gamma, dgamma, dbeta, work, g, t](int i) {
    cuda::batch_norm_backward(g, t, pick(xs, i).raw_data(), pick(dys, i).raw_data(), mean.raw_data(),
                              invstd.raw_data(), gamma.raw_data(), true, nullptr, dgamma.raw_data(), dbeta.raw_data(),
                              work.raw_data(), stream());
  };
  return c;
}

// The fused tails of a residual block (engine/ops.h), training mode, through the op:
// batch_norm_relu reads x and writes y (2 n e); batch_norm_add_relu also reads the residual
// (3 n e); + the statistics and parameters (24 C + 2 e C). The statistics' pass over x
// comes first: 3 n e moved for 2 n e (ceiling 67%), 4 n e for 3 n e (75%).
Case bn_relu_forward_op(const Shape& s, DType t, bool add) {
  const int64_t C = s[1];
  const double n = numel(s), bytes = (add ? 3 : 2) * n * esize(t) + double(C) * (24 + 2 * esize(t));
  Case c{shape_str(s) + " NHWC", dtype_name(t), bytes, sets_for(bytes),
         add ? "stats pass, then x + residual -> y: ceiling 75%" : "stats pass, then x -> y: ceiling 67%",
         nullptr};
  auto xs = random_sets(c.sets, s, t, kNHWC, 84), rs = random_sets(add ? c.sets : 0, s, t, kNHWC, 85);
  Tensor gamma = random_gpu({C}, t, kNCHW, 86), beta = random_gpu({C}, t, kNCHW, 87);
  Tensor rm = Tensor::zeros({C}, DType::f32, gpu()), rv = Tensor::full({C}, 1.0, DType::f32, gpu());
  c.call = [xs, rs, gamma, beta, rm, rv, add](int i) {
    if (add) (void)batch_norm_add_relu(pick(xs, i), pick(rs, i), gamma, beta, rm, rv, true);
    else (void)batch_norm_relu(pick(xs, i), gamma, beta, rm, rv, true);
  };
  return c;
}

// Their backward (launcher): read x, the relu's bits (n e / 16: Note [Relu mask bits] in
// kernels/cuda/batch_norm.h) and dy, write dx (3 n e + n e / 16), and with a residual also
// write its gradient, which the dx pass then reads instead of dy and the bits (4 n e); + 20 C
// (mean, invstd, gamma, dgamma, dbeta: f32). A reduction pass over x, the bits
// and dy precedes the dx pass: 5.1 n e moved for 3.1 n e (ceiling 60%), 6.1 n e for 4 n e (66%).
Case bn_relu_backward(const Shape& s, DType t, bool add) {
  const int64_t C = s[1];
  const double n = numel(s), bytes = (add ? 4.0 : 3.0625) * n * esize(t) + double(C) * 20;
  Case c{shape_str(s) + " NHWC", dtype_name(t), bytes, sets_for(bytes),
         add ? "reduction pass, then dx pass: ceiling 66%" : "reduction pass, then dx pass: ceiling 60%", nullptr};
  const cuda::BatchNormGeom g = bn_geom(s, kNHWC);
  Tensor mean = random_gpu({C}, DType::f32, kNCHW, 94), invstd = Tensor::full({C}, 1.3, DType::f32, gpu());
  // In the statistics dtype (Note [Batch norm parameters in the statistics dtype]).
  Tensor gamma = random_gpu({C}, DType::f32, kNCHW, 95), beta = random_gpu({C}, DType::f32, kNCHW, 96);
  std::vector<Tensor> xs = random_sets(c.sets, s, t, kNHWC, 97), dys = random_sets(c.sets, s, t, kNHWC, 98), masks;
  for (const Tensor& x : xs) {  // the bits as the forward leaves them: about half set
    Tensor y = Tensor::empty(s, t, gpu(), kNHWC);
    Tensor mask = Tensor::empty({int64_t(cuda::batch_norm_relu_mask_bytes(g, t))}, DType::u8, gpu());
    cuda::batch_norm_apply_relu(g, t, x.raw_data(), nullptr, mean.raw_data(), invstd.raw_data(), gamma.raw_data(),
                                beta.raw_data(), y.raw_data(), mask.data<uint8_t>(), stream());
    masks.push_back(mask);
  }
  auto dxs = empty_sets(c.sets, s, t, kNHWC), drs = empty_sets(add ? c.sets : 0, s, t, kNHWC);
  Tensor dgamma = Tensor::empty({C}, DType::f32, gpu()), dbeta = Tensor::empty({C}, DType::f32, gpu());
  Tensor work = bn_workspace(cuda::batch_norm_backward_workspace_bytes(g, t));
  c.call = [xs, masks, dys, dxs, drs, mean, invstd, gamma, dgamma, dbeta, work, g, t, add](int i) {
    cuda::batch_norm_backward_relu(g, t, pick(xs, i).raw_data(), pick(masks, i).data<uint8_t>(),
                                   pick(dys, i).raw_data(), mean.raw_data(), invstd.raw_data(), gamma.raw_data(), true,
                                   pick(dxs, i).raw_data(), dgamma.raw_data(), dbeta.raw_data(),
                                   add ? pick(drs, i).raw_data() : nullptr, work.raw_data(), stream());
  };
  return c;
}

// u8 (N, H, W, C) -> bf16 NHWC input: read 1 byte, write 2 per value: 3 n.
Case normalize(DType t) {
  const double bytes = numel(kPixels) * (1 + esize(t));
  Case c{"u8" + shape_str(kPixels) + " -> NHWC", dtype_name(t), bytes, sets_for(bytes), "", nullptr};
  auto px = random_sets(c.sets, kPixels, DType::u8, kNCHW, 100);
  c.call = [px, t](int i) {
    (void)normalize_pixels(pick(px, i), {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}, kNHWC, t);
  };
  return c;
}

// The element counts of ResNet50's parameters (1000 classes), in the model's order.
const std::vector<int64_t>& resnet50_param_sizes() {
  static const std::vector<int64_t> sizes = [] {
    std::vector<int64_t> v;
    for (const auto& [name, p] : models::make_model("resnet50", {})->named_parameters()) v.push_back(p.numel());
    return v;
  }();
  return sizes;
}

int64_t resnet50_params() {
  int64_t n = 0;
  for (int64_t s : resnet50_param_sizes()) n += s;
  return n;
}

// f32 -> bf16 of every parameter (the compute copy of the master weights): read 4, write 2: 6 n.
Case cast_params() {
  const int64_t n = resnet50_params();
  const double bytes = 6.0 * double(n);
  Case c{"[" + std::to_string(n) + "]", "f32->bf16", bytes, sets_for(bytes), "", nullptr};
  auto xs = random_sets(c.sets, {n}, DType::f32, kNCHW, 110);
  c.call = [xs](int i) { (void)pick(xs, i).to(DType::bf16); };
  return c;
}

// torch.optim.SGD (momentum 0.9, weight decay) over ResNet50's parameter list in fused
// multi-tensor launches: per value read + write p (8), read g (4), read + write the momentum
// buffer (8) = 20 n; + 2 n when the bf16 compute copy is written in the same pass.
Case sgd(bool bf16_copy) {
  const std::vector<int64_t>& sizes = resnet50_param_sizes();
  // One flat buffer per role; each parameter starts 512 bytes after the last one's start
  // (rounded up), as separately allocated tensors would (the allocator's 512-byte blocks).
  std::vector<int64_t> off;
  int64_t total = 0, n = 0;
  for (int64_t s : sizes) {
    off.push_back(total);
    total += (s + 127) / 128 * 128;
    n += s;
  }
  const double bytes = (bf16_copy ? 22.0 : 20.0) * double(n);
  Case c{std::to_string(sizes.size()) + " tensors, " + std::to_string(n), bf16_copy ? "f32 (+bf16)" : "f32", bytes,
         1, "1 launch (multi-tensor apply)", nullptr};
  Tensor p = random_gpu({total}, DType::f32, kNCHW, 120), g = random_gpu({total}, DType::f32, kNCHW, 121);
  Tensor buf = random_gpu({total}, DType::f32, kNCHW, 122);
  Tensor pb = bf16_copy ? Tensor::empty({total}, DType::bf16, gpu()) : Tensor();
  std::vector<cuda::SgdTensor> list;
  for (size_t i = 0; i < sizes.size(); ++i) {
    cuda::SgdTensor s;
    s.p = p.data<float>() + off[i];
    s.g = g.data<float>() + off[i];
    s.buf = buf.data<float>() + off[i];
    s.p_bf16 = bf16_copy ? static_cast<uint16_t*>(pb.raw_data()) + off[i] : nullptr;
    s.n = sizes[i];
    s.weight_decay = 1e-4;
    list.push_back(s);
  }
  cuda::SgdHyper h;
  h.lr = 1e-3;
  h.momentum = 0.9;
  // The list's device copy is uploaded on the first call and reused by the timed ones, as
  // an optimizer's is from step to step.
  auto table = std::make_shared<cuda::MultiTensorTable>();
  c.call = [p, g, buf, pb, list, h, table](int) { cuda::sgd_update(DType::f32, list, h, *table, stream()); };
  return c;
}

cuda::Pool2dGeom stem_pool_geom() {  // 3x3, stride 2, padding 1: 112 -> 56
  return {kStem[0], kStem[1], kStem[2], kStem[3], 56, 56, 3, 3, 2, 2, 1, 1, 1, 1, true};
}

// read x (n_in e); write y (n_out e) and the int64 argmax (8 n_out): n_in e + n_out (e + 8).
Case maxpool_forward(DType t) {
  const double n_in = numel(kStem), n_out = n_in / 4;
  const double bytes = n_in * esize(t) + n_out * (esize(t) + 8);
  Case c{shape_str(kStem) + " NHWC k3s2", dtype_name(t), bytes, sets_for(bytes),
         "the int64 argmax is 8 of each output's " + std::to_string(int(esize(t) + 8)) + " bytes", nullptr};
  auto xs = random_sets(c.sets, kStem, t, kNHWC, 130);
  c.call = [xs](int i) { (void)max_pool2d(pick(xs, i), Pool2dParams::make(3, 2, 1)); };
  return c;
}

// read dy (n_out e) and argmax (8 n_out), write dx (n_in e): n_out (e + 8) + n_in e.
Case maxpool_backward(DType t) {
  const double n_in = numel(kStem), n_out = n_in / 4;
  const double bytes = n_out * (esize(t) + 8) + n_in * esize(t);
  Case c{shape_str(kStem) + " NHWC k3s2", dtype_name(t), bytes, sets_for(bytes), "", nullptr};
  const cuda::Pool2dGeom g = stem_pool_geom();
  const Shape out = {kStem[0], kStem[1], 56, 56};
  auto dys = random_sets(c.sets, out, t, kNHWC, 140);
  auto dxs = empty_sets(c.sets, kStem, t, kNHWC);
  std::vector<Tensor> idxs;
  for (int k = 0; k < c.sets; ++k) {  // argmax of a random input, as the forward leaves it
    const Tensor x = random_gpu(kStem, t, kNHWC, 150 + uint64_t(k));
    Tensor y = Tensor::empty(out, t, gpu(), kNHWC), idx = Tensor::empty(out, DType::i64, gpu(), kNHWC);
    cuda::max_pool2d_forward(g, t, x.raw_data(), y.raw_data(), idx.data<int64_t>(), stream());
    idxs.push_back(idx);
  }
  c.call = [dys, dxs, idxs, g, t](int i) {
    cuda::max_pool2d_backward(g, t, pick(dys, i).raw_data(), pick(idxs, i).data<int64_t>(), pick(dxs, i).raw_data(),
                              stream());
  };
  return c;
}

cuda::Pool2dGeom global_pool_geom() {
  return {kDeep[0], kDeep[1], kDeep[2], kDeep[3], 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, true};
}

// (N, C, 7, 7) -> (N, C): read n e, write N C e.
Case gap_forward(DType t) {
  const double bytes = numel(kDeep) * esize(t) + double(kDeep[0] * kDeep[1]) * esize(t);
  Case c{shape_str(kDeep) + " NHWC", dtype_name(t), bytes, sets_for(bytes), "", nullptr};
  auto xs = random_sets(c.sets, kDeep, t, kNHWC, 160);
  c.call = [xs](int i) { (void)global_avg_pool(pick(xs, i)); };
  return c;
}

// dx = dy / 49 broadcast: read N C e, write n e.
Case gap_backward(DType t) {
  const double bytes = numel(kDeep) * esize(t) + double(kDeep[0] * kDeep[1]) * esize(t);
  Case c{shape_str(kDeep) + " NHWC", dtype_name(t), bytes, sets_for(bytes), "", nullptr};
  auto dys = random_sets(c.sets, {kDeep[0], kDeep[1], 1, 1}, t, kNHWC, 170);
  auto dxs = empty_sets(c.sets, kDeep, t, kNHWC);
  const cuda::Pool2dGeom g = global_pool_geom();
  c.call = [dys, dxs, g, t](int i) {
    cuda::adaptive_avg_pool2d_backward(g, t, pick(dys, i).raw_data(), pick(dxs, i).raw_data(), stream());
  };
  return c;
}

// Forward: read logits (4 N K) and targets (8 N); write probs (4 N K, kept for the backward),
// the row losses (4 N) and the loss (4).
Case ce_forward() {
  const int64_t N = kAct[0], K = kClasses;
  const double bytes = 8.0 * double(N * K) + 12.0 * double(N) + 4;
  Case c{shape_str({N, K}), "f32", bytes, sets_for(bytes), "1 MB: launch-latency-bound", nullptr};
  auto ls = random_sets(c.sets, {N, K}, DType::f32, kNCHW, 180);
  std::vector<Tensor> ts;
  Generator gen(181);
  for (int k = 0; k < c.sets; ++k) ts.push_back(randint({N}, gen, 0, K, gpu()));
  c.call = [ls, ts](int i) { (void)cross_entropy(pick(ls, i), pick(ts, i)); };
  return c;
}

// Backward: read probs (4 N K), targets (8 N), the loss gradient (4); write dlogits (4 N K).
Case ce_backward() {
  const int64_t N = kAct[0], K = kClasses;
  const double bytes = 8.0 * double(N * K) + 8.0 * double(N) + 4;
  Case c{shape_str({N, K}), "f32", bytes, sets_for(bytes), "1 MB: launch-latency-bound", nullptr};
  auto ps = random_sets(c.sets, {N, K}, DType::f32, kNCHW, 190);
  auto ds = empty_sets(c.sets, {N, K}, DType::f32, kNCHW);
  std::vector<Tensor> ts;
  Generator gen(191);
  for (int k = 0; k < c.sets; ++k) ts.push_back(randint({N}, gen, 0, K, gpu()));
  const Tensor g = Tensor::full({}, 1.0, DType::f32, gpu());
  c.call = [ps, ds, ts, g, N, K](int i) {
    cuda::cross_entropy_backward(DType::f32, N, K, pick(ps, i).raw_data(), pick(ts, i).data<int64_t>(), 0.0,
                                 g.raw_data(), pick(ds, i).raw_data(), stream());
  };
  return c;
}

// Tensor::to(MemoryFormat): a batched transpose, read n e, write n e.
Case relayout(const Shape& s, DType t, MemoryFormat from) {
  const double bytes = 2 * numel(s) * esize(t);
  const MemoryFormat to = from == kNCHW ? kNHWC : kNCHW;
  Case c{shape_str(s) + (from == kNCHW ? " NCHW->NHWC" : " NHWC->NCHW"), dtype_name(t), bytes, sets_for(bytes), "",
         nullptr};
  auto xs = random_sets(c.sets, s, t, from, 200);
  c.call = [xs, to](int i) { (void)pick(xs, i).to(to); };
  return c;
}

std::vector<std::pair<std::string, std::function<Case()>>> cases() {
  const DType bf = DType::bf16, f32 = DType::f32;
  return {
      {"relu fwd", [=] { return elementwise_unary(bf); }},
      {"relu fwd", [=] { return elementwise_unary(f32); }},
      {"relu bwd", [=] { return relu_backward(bf); }},
      {"add", [=] { return binary_op(bf, false); }},
      {"add", [=] { return binary_op(f32, false); }},
      {"add_relu", [=] { return binary_op(bf, true); }},
      {"batch_norm stats", [=] { return bn_stats(kAct, bf, kNHWC); }},
      {"batch_norm stats", [=] { return bn_stats(kStem, bf, kNHWC); }},
      {"batch_norm stats", [=] { return bn_stats(kDeep, bf, kNHWC); }},
      {"batch_norm stats", [=] { return bn_stats(kStem, DType::f32, kNCHW); }},
      {"batch_norm stats", [=] { return bn_stats(kDeep, DType::f32, kNCHW); }},
      {"batch_norm apply", [=] { return bn_apply(kAct, bf); }},
      {"batch_norm apply", [=] { return bn_apply(kDeep, bf); }},
      {"batch_norm fwd (op)", [=] { return bn_forward_op(kAct, bf); }},
      {"batch_norm fwd (op)", [=] { return bn_forward_op(kDeep, bf); }},
      {"batch_norm bwd", [=] { return bn_backward(kAct, bf, kNHWC); }},
      {"batch_norm bwd", [=] { return bn_backward(kDeep, bf, kNHWC); }},
      {"batch_norm bwd", [=] { return bn_backward(kStem, DType::f32, kNCHW); }},
      {"batch_norm bwd reduce", [=] { return bn_backward_reduce(kStem, bf, kNHWC); }},
      {"batch_norm bwd reduce", [=] { return bn_backward_reduce(kDeep, bf, kNHWC); }},
      {"batch_norm bwd reduce", [=] { return bn_backward_reduce(kStem, DType::f32, kNCHW); }},
      {"batch_norm_relu fwd", [=] { return bn_relu_forward_op(kAct, bf, false); }},
      {"batch_norm_relu bwd", [=] { return bn_relu_backward(kAct, bf, false); }},
      {"bn_add_relu fwd", [=] { return bn_relu_forward_op(kAct, bf, true); }},
      {"bn_add_relu bwd", [=] { return bn_relu_backward(kAct, bf, true); }},
      {"normalize_pixels", [=] { return normalize(bf); }},
      {"cast params", [=] { return cast_params(); }},
      {"sgd update", [=] { return sgd(false); }},
      {"sgd update +bf16 copy", [=] { return sgd(true); }},
      {"max_pool2d fwd", [=] { return maxpool_forward(bf); }},
      {"max_pool2d bwd", [=] { return maxpool_backward(bf); }},
      {"global_avg_pool fwd", [=] { return gap_forward(bf); }},
      {"global_avg_pool bwd", [=] { return gap_backward(bf); }},
      {"cross_entropy fwd", [=] { return ce_forward(); }},
      {"cross_entropy bwd", [=] { return ce_backward(); }},
      {"relayout", [=] { return relayout(kAct, bf, kNCHW); }},
      {"relayout", [=] { return relayout(kAct, bf, kNHWC); }},
      {"relayout input", [=] { return relayout(kInput, f32, kNCHW); }},
  };
}

void print_row(const Row& r) {
  if (r.failed) {
    std::printf("%-22s %-32s %-11s  FAILED: %s\n", r.name.c_str(), r.shape.c_str(), r.dtype.c_str(), r.note.c_str());
  } else {
    std::printf("%-22s %-32s %-11s %9.1f %9.1f %8.0f %6.1f%% %4d  %s%s\n", r.name.c_str(), r.shape.c_str(),
                r.dtype.c_str(), r.us, r.bytes / 1e6, r.gbps, r.pct, r.sets, r.pct >= kTargetPct ? "" : "[<80%] ",
                r.note.c_str());
  }
  std::fflush(stdout);
}

void print_header() {
  std::printf("%-22s %-32s %-11s %9s %9s %8s %7s %4s  %s\n", "op", "shape", "dtype", "us/call", "min MB", "GB/s",
              "% copy", "sets", "note");
}

int run(const Options& o) {
  const cuda::DeviceProps props = cuda::device_props(0);
  int l2 = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  if (l2 > 0) g_l2_bytes = l2;
  NoGradGuard no_grad;
  std::printf("cuda_kernel_bench: %s, %d SMs, L2 %.0f MB, %s\n", props.name.c_str(), props.sm_count,
              double(g_l2_bytes) / 1e6, cuda::runtime_versions().c_str());
  const double copy = copy_gbps();
  std::printf("device-to-device copy, 1 GiB: %.0f GB/s (read + write); target per kernel: %.0f%% = %.0f GB/s\n\n",
              copy, kTargetPct, copy * kTargetPct / 100);
  // The profiler's %bw column measures against this copy (Note [Device peaks] in profile/peaks.h).
  try {
    rt::prof::DevicePeaks peaks;
    peaks.key = rt::prof::key_for(gpu());
    peaks.copy_bytes_per_s = copy * 1e9;
    peaks.flops = rt::prof::gpu_datasheet_flops(peaks.key);
    if (!peaks.flops.empty()) peaks.flops_source = "datasheet (dense)";
    rt::prof::store_peaks(peaks);
    std::printf("stored in %s for the profiler\n\n", rt::prof::peaks_cache_path().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_kernel_bench: warning: the copy bandwidth was not stored for the profiler: %s\n",
                 e.what());
  }
  print_header();

  std::vector<Row> rows;
  for (auto& [name, build] : cases()) {
    if (!o.only.empty() && name.find(o.only) == std::string::npos) continue;
    Row r;
    r.name = name;
    try {
      Case c = build();
      r.shape = c.shape;
      r.dtype = c.dtype;
      r.bytes = c.bytes;
      r.sets = c.sets;
      r.note = c.note;
      r.us = time_us(c.call, o, &r.reps);
      r.gbps = c.bytes / (r.us * 1e-6) / 1e9;
      r.pct = 100.0 * r.gbps / copy;
    } catch (const Error& e) {
      r.failed = true;
      r.note = e.what();
    }
    print_row(r);
    rows.push_back(r);
    allocator_for(gpu()).empty_cache();
  }

  int met = 0, failed = 0;
  for (const Row& r : rows) {
    failed += r.failed;
    met += !r.failed && r.pct >= kTargetPct;
  }
  std::printf("\n%d of %zu kernels at >= %.0f%% of the copy bandwidth (%.0f GB/s)%s\n", met, rows.size() - failed,
              kTargetPct, copy, failed ? "; some cases FAILED" : "");

  if (!o.json.empty()) {
    json::Value doc = json::Value::object();
    doc.set("bench", "cuda_kernel_bench");
    doc.set("device", props.name);
    doc.set("versions", cuda::runtime_versions());
    doc.set("l2_bytes", g_l2_bytes);
    doc.set("copy_gbps", copy);
    doc.set("target_pct", kTargetPct);
    doc.set("met", met);
    json::Value arr = json::Value::array();
    for (const Row& r : rows) {
      json::Value v = json::Value::object();
      v.set("op", r.name);
      v.set("shape", r.shape);
      v.set("dtype", r.dtype);
      v.set("failed", r.failed);
      v.set("us", r.us);
      v.set("min_bytes", r.bytes);
      v.set("gbps", r.gbps);
      v.set("pct_copy", r.pct);
      v.set("sets", r.sets);
      v.set("reps", r.reps);
      v.set("note", r.note);
      arr.push_back(std::move(v));
    }
    doc.set("rows", std::move(arr));
    std::ofstream f(o.json);
    f << json::dump(doc) << "\n";
    if (!f) std::fprintf(stderr, "cuda_kernel_bench: could not write %s\n", o.json.c_str());
    else std::printf("results in %s\n", o.json.c_str());
  }
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const rt::UsageError& e) {
    return rt::bench::usage_failure("cuda_kernel_bench", e, flag_table(), kUsage);
  }
  std::string why;
  if (rt::cuda::device_count(&why) == 0) {
    std::printf("SKIPPED: no CUDA device (%s): cuda_kernel_bench\n", why.c_str());
    return 0;
  }
  try {
    return run(o);
  } catch (const rt::Error& e) {
    std::fprintf(stderr, "cuda_kernel_bench: %s\n", e.what());
    return 1;
  }
}
