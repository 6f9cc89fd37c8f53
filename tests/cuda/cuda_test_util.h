// Helpers for the GPU-vs-CPU tests: device detection (tests skip visibly without a GPU),
// per-dtype tolerances, NaN-poisoned outputs, random inputs rounded to the dtype under test,
// and tolerant comparison against the CPU backend.
//
// The reference: the CPU backend computes in f32 or f64 only, so a bf16/f16 CUDA run is
// compared with an f32 CPU run on the *same* values (the inputs are rounded to bf16/f16
// first, then widened), and an f32/f64 run with the CPU in its own dtype.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/random.h"
#include "engine/tensor.h"
#include "kernels/cuda/runtime.h"
#include "tests/test_util.h"
#if RINGTAPE_CUDA_EMU
#include "cuda_emu/emu.h"
#endif

namespace rt::cuda_test {

// True when a GPU is usable; otherwise prints the SKIPPED line and the test passes.
inline bool have_gpu(const char* test) {
  std::string why;
  if (cuda::device_count(&why) > 0) return true;
  std::printf("SKIPPED: no CUDA device (%s): %s\n", why.c_str(), test);
  return false;
}

// The tolerances (gpu_tol_for), check_close and rnd are the op tests' own (tests/test_util.h,
// Note [Tolerances]): one table for the CPU and the GPU tests.
using test::check_close;
using test::gpu_tol_for;
using test::kExact;
using test::kGpuTolBF16;
using test::kGpuTolF16;
using test::kGpuTolF32;
using test::kTolF64;
using test::rnd;
using test::Tol;

inline constexpr DType kFloatTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

// The CPU dtype the reference for a CUDA dtype computes in.
inline DType ref_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

inline Device gpu() { return Device::cuda(0); }

// Under --config=cuda-emu the GPU is emulated on the CPU, every load and store of a kernel
// checked: 10-100 ns an element (docs/cuda-on-cpu.md). Tests leave out their largest sizes
// there and say which; the GPU machine runs them all.
#if RINGTAPE_CUDA_EMU
inline constexpr bool kEmulatedGpu = true;
#else
inline constexpr bool kEmulatedGpu = false;
#endif

inline Tensor in_fmt(const Tensor& t, MemoryFormat f) { return t.ndim() == 4 ? t.to(f) : t; }

// The value v64 as the CUDA run sees it (dtype t, format f, on the GPU) ...
inline Tensor to_gpu(const Tensor& v64, DType t, MemoryFormat f = MemoryFormat::contiguous) {
  return in_fmt(v64.to(t), f).to(gpu());
}
// ... and as the CPU reference sees it: the same rounded values, widened to ref_dtype(t).
// Always a new tensor: .to() of the same dtype and format returns the tensor itself (as
// PyTorch's does), and two references made from one value would share its autograd state,
// so the second's gradient would have the first's added (pool_cuda_test's f64
// global_avg_pool case did, first seen when the GPU tests ran under --config=cuda-emu).
inline Tensor to_ref(const Tensor& v64, DType t, MemoryFormat f = MemoryFormat::contiguous) {
  return in_fmt(v64.to(t).to(ref_dtype(t)), f).clone();
}

// A GPU tensor whose every element is NaN: a kernel that misses an element leaves a NaN,
// and NaN never compares close.
inline Tensor poisoned(const Shape& s, DType t, MemoryFormat f = MemoryFormat::contiguous) {
  return Tensor::full(s, std::numeric_limits<double>::quiet_NaN(), t, gpu(), f);
}

// Leaves the device allocator's free blocks full of NaN, so outputs allocated inside the ops
// (which the test cannot fill first) start as NaN when the allocator reuses memory. The
// emulator (cuda_test::kEmulatedGpu) does more on every block it hands out: its bytes read as
// NaN and a kernel reading one before it is written is a reported fault.
inline void poison_allocator(int64_t max_elems) {
  if (kEmulatedGpu) return;
  for (int64_t n = 1; n <= max_elems * 2; n *= 2) Tensor t = poisoned({n}, DType::f64);
}

// got: a CUDA tensor; want: the CPU reference (test::check_close, and the result is on the GPU:
// an op that fell back to the CPU would pass the values).
// Emulated, a mismatch also says what reproduces the run (thread order, device numerics).
inline void check_on_gpu(const Tensor& got, const Tensor& want, Tol tol, const std::string& what,
                         double scale = 1.0) {
#if RINGTAPE_CUDA_EMU
  const std::string named = what + " [emulated: " + emu::emulation_settings() + "]";
#else
  const std::string& named = what;
#endif
  if (got.defined()) CHECK_MESSAGE(got.device() == gpu(), named, ": result on ", got.device().str(), ", not the GPU");
  check_close(got, want, tol, named, scale);
}

// Per channel of y (N, C, ...) on any device, in logical NCHW order: the sum and the sum of
// squares in double, and the sum of |y| (the scale of f32 accumulation's error), as fused
// convolutions' statistics are checked (Note [Fused convolutions] in kernels/cuda/conv2d.h).
inline void channel_sums(const Tensor& y, std::vector<double>* sum, std::vector<double>* sqsum,
                         std::vector<double>* abs) {
  const std::vector<double> v = y.to(Device::cpu()).to(MemoryFormat::contiguous).to_vector<double>();
  const int64_t N = y.size(0), C = y.size(1), S = y.numel() / (N * C);
  sum->assign(size_t(C), 0.0), sqsum->assign(size_t(C), 0.0), abs->assign(size_t(C), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < S; ++i) {
        const double e = v[size_t((n * C + c) * S + i)];
        (*sum)[size_t(c)] += e, (*sqsum)[size_t(c)] += e * e, (*abs)[size_t(c)] += std::fabs(e);
      }
}

// A fused convolution's (or batch norm's) per-channel sums of y against those of the y it
// wrote, in double: f32 accumulation over every element of a channel, judged against the sum of
// magnitudes (kSumTolF32, Note [Tolerances]; the sum of squares is its own magnitude).
inline void check_channel_sums(const Tensor& y, const Tensor& got_sum, const Tensor& got_sqsum,
                               const std::string& what) {
  std::vector<double> sum, sqsum, abs;
  channel_sums(y, &sum, &sqsum, &abs);
  const std::vector<double> gs = got_sum.to_vector<double>(), gq = got_sqsum.to_vector<double>();
  REQUIRE_MESSAGE(gs.size() == sum.size(), what, ": ", gs.size(), " sums for ", sum.size(), " channels");
  REQUIRE_MESSAGE(gq.size() == sum.size(), what, ": ", gq.size(), " sums of squares for ", sum.size(), " channels");
  for (size_t o = 0; o < sum.size(); ++o) {
    CHECK_MESSAGE(test::kSumTolF32.holds(gs[o], sum[o], abs[o]), what, " sum[", o, "] ", gs[o], " vs ", sum[o]);
    CHECK_MESSAGE(test::kSumTolF32.holds(gq[o], sqsum[o], sqsum[o]), what, " sqsum[", o, "] ", gq[o], " vs ",
                  sqsum[o]);
  }
}

inline std::string label(const std::string& op, DType t, const Shape& s, MemoryFormat f = MemoryFormat::contiguous) {
  return op + " " + dtype_name(t) + shape_str(s) + (f == MemoryFormat::channels_last ? " NHWC" : "");
}

// ---- one line per op: GPU against CPU, forward and backward -------------------------------

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// MatchOptions().positive().with_formats({MemoryFormat::channels_last}) in one expression.
struct MatchOptions {
  std::vector<MemoryFormat> formats;  // per input (4-D inputs only); missing entries: contiguous
  bool positive_inputs = false;       // inputs |v| + 0.25 (log, sqrt, a fractional pow, a divisor)
  double input_scale = 1.0;           // inputs times this before the rounding to t (e.g. logits of spread 2)
  double input_shift = 0.0;           // then plus this (batch norm: a mean off 0, as a layer's input has)
  uint64_t seed = 1;
  double tol_scale = 1.0;             // widens gpu_tol_for(t); a test that needs it says why
  // Bit for bit (kExact) instead of gpu_tol_for(t): ops that only move, pick or scale by a power
  // of two (a permute, a relayout, max) give the CPU's values exactly, a 16-bit result against
  // the CPU's f32 one too (values compared, the 16-bit side widened exactly). exact_output alone:
  // the gradients stay within gpu_tol_for(t) (autograd adds the gradients of an input used twice,
  // one rounding per add in t). Integer dtypes (i32, i64, u8) need exact_output.
  bool exact_output = false;
  bool exact_grads = false;
  bool backward = true;                // false: the output only (argmax, a copy_ that autograd does not see)
  bool upstream_other_format = false;  // the upstream gradient of a 4-D output in the other format than it
  // The state the op updates in place (batch norm's running statistics): made per dtype from the
  // CPU inputs (their shapes) and the case's generator, each copied to both sides in its own
  // dtype, passed to f after the inputs (in[shapes.size() + j], requiring no grad) and compared
  // after the forward within gpu_tol_for(its dtype), widened as the output's.
  std::function<std::vector<Tensor>(const std::vector<Tensor>& ref_inputs, Generator& g)> in_place;
  // The `scale` of the output's and of input i's gradient's comparison (Note [Tolerances]):
  // by default 1 for the output, and sqrt(output / input elements) for a gradient (an input
  // broadcast over the output has its gradient summed over that many terms). An op whose
  // output is a sum (sum, a matmul, a convolution) says over how many terms.
  std::function<double(const Tensor& out, const std::vector<Tensor>& in)> forward_scale;
  std::function<double(size_t i, const Tensor& out, const Tensor& in)> grad_scale;

  MatchOptions& with_formats(std::vector<MemoryFormat> f) {
    formats = std::move(f);
    return *this;
  }
  MatchOptions& positive() {
    positive_inputs = true;
    return *this;
  }
  MatchOptions& scaled_inputs(double k) {
    input_scale = k;
    return *this;
  }
  MatchOptions& shifted_inputs(double k) {
    input_shift = k;
    return *this;
  }
  MatchOptions& with_seed(uint64_t s) {
    seed = s;
    return *this;
  }
  MatchOptions& widened(double k) {
    tol_scale = k;
    return *this;
  }
  MatchOptions& exact() {
    exact_output = exact_grads = true;
    return *this;
  }
  MatchOptions& exact_forward() {
    exact_output = true;
    return *this;
  }
  MatchOptions& forward_only() {
    backward = false;
    return *this;
  }
  MatchOptions& upstream_in_other_format() {
    upstream_other_format = true;
    return *this;
  }
  MatchOptions& updating(std::function<std::vector<Tensor>(const std::vector<Tensor>&, Generator&)> make) {
    in_place = std::move(make);
    return *this;
  }
  MatchOptions& with_forward_scale(std::function<double(const Tensor&, const std::vector<Tensor>&)> f) {
    forward_scale = std::move(f);
    return *this;
  }
  MatchOptions& with_grad_scale(std::function<double(size_t, const Tensor&, const Tensor&)> f) {
    grad_scale = std::move(f);
    return *this;
  }
};

// One dtype's inputs: dev on the GPU in t, ref on the CPU in ref_dtype(t) holding the same
// values, leaves that require grad when the run has a backward. Integer dtypes: the values
// times 1000 truncated (u8: their low byte), so that neighbouring elements' bits differ, the
// same tensor on both sides.
struct MatchInputs {
  std::vector<Tensor> dev, ref;
  std::string what;
  int64_t biggest = 1;
};
inline MatchInputs match_inputs(const std::string& name, const std::vector<Shape>& shapes, DType t,
                                const MatchOptions& opt, Generator& g) {
  MatchInputs r{{}, {}, name + " " + dtype_name(t), 1};
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor v = randn(shapes[i], g, DType::f64, Device::cpu());
    double* p = v.data<double>();
    for (int64_t j = 0; j < v.numel(); ++j) {
      p[j] = (opt.positive_inputs ? std::abs(p[j]) + 0.25 : p[j]) * opt.input_scale + opt.input_shift;
      if (!is_floating(t)) p[j] = t == DType::u8 ? double(int64_t(p[j] * 1000) & 0xFF) : std::trunc(p[j] * 1000);
    }
    const MemoryFormat fmt = i < opt.formats.size() ? opt.formats[i] : MemoryFormat::contiguous;
    if (is_floating(t)) {
      r.dev.push_back(to_gpu(v, t, fmt));
      r.ref.push_back(to_ref(v, t, fmt));
    } else {
      const Tensor c = in_fmt(v.to(t), fmt);
      r.dev.push_back(c.to(gpu()));
      r.ref.push_back(c.clone());
    }
    if (opt.backward && is_floating(t)) r.dev.back().set_requires_grad(true), r.ref.back().set_requires_grad(true);
    r.what += " " + shape_str(shapes[i]) + (r.dev.back().format() == MemoryFormat::channels_last ? "NHWC" : "");
    r.biggest = std::max(r.biggest, v.numel());
  }
  return r;
}

// Backward from the same random upstream gradient (rounded to the GPU output's dtype, widened
// to the CPU's), then every input's gradient against the CPU's.
inline void check_matches_backward(const Tensor& yd, const Tensor& yr, const MatchInputs& in, Generator& g, Tol tol,
                                   const MatchOptions& opt) {
  const auto upstream_format = [&opt](const Tensor& y) {
    if (!opt.upstream_other_format) return y.format();
    return y.format() == MemoryFormat::contiguous ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  };
  const Tensor up = randn(yr.shape(), g, DType::f64, Device::cpu());
  poison_allocator(std::max(in.biggest, up.numel()));
  yd.backward(in_fmt(up.to(yd.dtype()), upstream_format(yd)).to(gpu()));
  yr.backward(in_fmt(up.to(yd.dtype()).to(yr.dtype()), upstream_format(yr)).clone());
  const Tol gtol = opt.exact_grads ? kExact : tol;
  for (size_t i = 0; i < in.dev.size(); ++i) {
    const Tensor &dev = in.dev[i], &ref = in.ref[i];
    const double terms = double(std::max<int64_t>(1, yr.numel())) / double(std::max<int64_t>(1, ref.numel()));
    const double scale = opt.grad_scale ? opt.grad_scale(i, yr, ref) : std::sqrt(std::max(1.0, terms));
    check_on_gpu(dev.grad(), ref.grad(), gtol, in.what + " grad " + std::to_string(i), scale);
    if (dev.grad().defined() && ref.grad().defined())
      CHECK_MESSAGE(dev.grad().format() == ref.grad().format(), in.what, ": grad ", i, "'s formats differ");
  }
}

// Runs op f on the same random inputs (one per shape) on the GPU in dtype t and on the CPU
// in ref_dtype(t) (the values rounded to t first), then backward from the same random
// upstream gradient, and checks the output and every input's gradient within gpu_tol_for(t)
// (or exactly), at the scales MatchOptions says. Without a GPU it prints the SKIPPED line and
// returns. A user's new op, checked on every dtype:
//   cuda_test::check_matches_cpu("silu", [](const std::vector<Tensor>& in) { return silu(in[0]); }, {{2, 3, 4, 5}});
// Arguments that are not compared (integer targets, a constant): f captures them on the CPU
// and moves them to its inputs' device, e.g. cross_entropy(in[0], targets.to(in[0].device())).
inline void check_matches_cpu(const std::string& name, const OpFn& f, const std::vector<Shape>& shapes,
                              const std::vector<DType>& dtypes = {DType::f32, DType::f64, DType::bf16, DType::f16},
                              const MatchOptions& opt = {}) {
  if (!have_gpu(name.c_str())) return;
  for (DType t : dtypes) {
    REQUIRE_MESSAGE((is_floating(t) || opt.exact_output), name, ": ", dtype_name(t), " compares only exactly");
    Generator g(opt.seed);
    const MatchInputs in = match_inputs(name, shapes, t, opt, g);
    std::vector<Tensor> dev_args = in.dev, ref_args = in.ref, state_dev, state_ref;
    if (opt.in_place)
      for (const Tensor& s : opt.in_place(in.ref, g)) {
        state_dev.push_back(s.clone().to(gpu())), state_ref.push_back(s.clone());
        dev_args.push_back(state_dev.back()), ref_args.push_back(state_ref.back());
      }
    const Tol tol = gpu_tol_for(t).scaled(opt.tol_scale);
    poison_allocator(in.biggest);
    const Tensor yd = f(dev_args), yr = f(ref_args);
    check_on_gpu(yd, yr, opt.exact_output ? kExact : tol, in.what + " forward",
                 opt.forward_scale ? opt.forward_scale(yr, in.ref) : 1.0);
    CHECK_MESSAGE(yd.format() == yr.format(), in.what, ": result formats differ");
    for (size_t j = 0; j < state_dev.size(); ++j)
      check_on_gpu(state_dev[j], state_ref[j], gpu_tol_for(state_ref[j].dtype()).scaled(opt.tol_scale),
                   in.what + " in place " + std::to_string(j));
    if (opt.backward && is_floating(t)) check_matches_backward(yd, yr, in, g, tol, opt);
  }
}

// Shapes drawn at random (Note [Tolerances] is per dtype, not per shape): `draw` returns one
// case's input shapes and their formats from the generator; `cases` cases, seeded by `seed`
// and reproducible, each checked as check_matches_cpu does. A fixed list of shapes misses
// tiling and remainder bugs; draws of odd and 1x1 spatial sizes, channel counts off the
// vector width and batch 1 find them. An op with parameters drawn with the shapes (a dim, a
// permutation, a split point) comes with each draw (ShapeDraw::op; f may then be null).
struct ShapeDraw {
  std::vector<Shape> shapes;
  std::vector<MemoryFormat> formats;  // per input, as MatchOptions::formats
  OpFn op = nullptr;                  // this case's op; null: the sweep's f
};
inline void check_matches_cpu_sweep(const std::string& name, const OpFn& f,
                                    const std::function<ShapeDraw(std::mt19937_64&)>& draw, int cases,
                                    uint64_t seed,
                                    const std::vector<DType>& dtypes = {DType::f32, DType::f64, DType::bf16,
                                                                        DType::f16},
                                    MatchOptions opt = {}) {
  if (!have_gpu(name.c_str())) return;
  std::mt19937_64 rng(seed);
  for (int k = 0; k < cases; ++k) {
    const ShapeDraw d = draw(rng);
    REQUIRE_MESSAGE((d.op || f), name, ": no op for case ", k);
    opt.formats = d.formats;
    opt.seed = seed * 1000 + uint64_t(k);
    check_matches_cpu(name + " case " + std::to_string(k) + " (seed " + std::to_string(seed) + ")", d.op ? d.op : f,
                      d.shapes, dtypes, opt);
  }
}

}  // namespace rt::cuda_test
