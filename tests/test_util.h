// Helpers for the op tests, CPU and GPU alike: the one table of tolerances (Note [Tolerances]),
// random inputs, tolerant comparison with readable failures, and a gradcheck wrapper. The
// GPU-vs-CPU harness (tests/cuda/cuda_test_util.h) builds on these.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/gradcheck.h"
#include "engine/profiler.h"
#include "engine/random.h"
#include "engine/tensor.h"

namespace rt::test {

// Note [Tolerances]
// A test compares `got` with a reference `want` elementwise as
//   |got - want| <= atol * scale + rtol * |want|      (NaN never passes)
// with `scale` 1 for elementwise results and sqrt(terms) for a sum (the rounding errors of
// a sum grow like a random walk over its terms). Two kinds of comparison, each with its
// tolerances per dtype, all of them here; a test that widens one says why where it does.
//
// Against an f64 reference (tol_for: the CPU tests, an op's f32 path against its own f64
// path or a reference written in double):
//   f64  both sides compute in double; only the order of summation differs.
//   f32  GEMMs of a few thousand products accumulate ~1e-6 relative rounding; 1e-4 leaves
//        room for sums over whole batches (batch-norm statistics).
// The GPU against the CPU backend on the same values (gpu_tol_for: tests/cuda, where bf16
// and f16 inputs are rounded first and the CPU computes in f32):
//   f64  as above.
//   f32  elementwise results match to an ulp or two (fma contraction); the GPU accumulates
//        sums in float where the CPU uses double: 1e-5 absolute (times sqrt(terms)).
//   bf16 8 significant bits; one rounding of the result is up to 2^-9 ~ 2e-3 relative, and
//        a composed backward (square: g*x, then *2) rounds two or three times: 1e-2.
//   f16  11 significant bits; one rounding is up to 2^-11 ~ 4.9e-4 relative, two or three
//        roundings in a composed backward reach ~1.5e-3: 2e-3 relative, 1e-3 absolute.
struct Tol {
  double atol, rtol;
  Tol scaled(double k) const { return Tol{atol * k, rtol * k}; }
};
inline constexpr Tol kExact{0, 0};
inline constexpr Tol kTolF64{1e-10, 1e-9};
inline constexpr Tol kTolF32{1e-5, 1e-4};     // f32 against f64
inline constexpr Tol kGpuTolF32{1e-5, 1e-5};  // the GPU's f32 against the CPU's f32
inline constexpr Tol kGpuTolBF16{1e-2, 1e-2};
inline constexpr Tol kGpuTolF16{1e-3, 2e-3};

// Against an f64 reference: an f64 result or an f32 one.
inline Tol tol_for(DType t) { return t == DType::f64 ? kTolF64 : kTolF32; }

// The GPU in dtype t against the CPU backend on the same (rounded) values.
inline Tol gpu_tol_for(DType t) {
  switch (t) {
    case DType::f64: return kTolF64;
    case DType::bf16: return kGpuTolBF16;
    case DType::f16: return kGpuTolF16;
    default: return kGpuTolF32;
  }
}

// Note [Tolerances] goes on: the comparisons that are not one value against its reference's,
// each with its rows and why.
//
// A sum against the magnitudes of its terms (MagnitudeTol), element by element:
//   |got - want| <= per_magnitude * magnitude + floor
// where `magnitude` is the sum of |term| of the sum being checked, the scale of its rounding:
//   kSumTolF32    a sum of many f32 terms accumulated in float (a fused convolution's output
//                 sums per channel): f32's unit 2^-23 times the magnitude, x8 for the
//                 accumulation order; 1e-6 for sums whose terms are all near 0.
//   kTermsTolBF16 a bf16 result of two terms rounded separately (a gradient summed in place
//                 or out of place): 3 roundings of 2^-8 of the two terms' magnitudes; 1e-6
//                 where both terms are near 0. The terms can cancel, so a bound relative to
//                 the result would fail a correct kernel.
struct MagnitudeTol {
  double per_magnitude, floor;
  bool holds(double got, double want, double magnitude) const {
    return std::abs(got - want) <= per_magnitude * magnitude + floor;  // NaN never holds
  }
};
inline constexpr MagnitudeTol kSumTolF32{8 * 0x1p-23, 1e-6};
inline constexpr MagnitudeTol kTermsTolBF16{3 * 0x1p-8, 1e-6};
//
// The same computation in another order (shard_bound_for; synchronised batch norm's shards
// against the whole batch, Note [Synchronised batch norm] in engine/ops/batch_norm_sync.h),
// the largest |got - want| over the result's largest |value|:
//   On the CPU, statistics and backward sums are double in both orders, ~1e-16 apart:
//     f64  1e-12, with room;
//     f32  the per-channel coefficients round to the same floats almost always, and the
//          summed dweight/dbias add K float-rounded shard sums: 4 ulps, 4 * 2^-23.
//   On the GPU, the whole batch's statistics are float Welford states merged over the grid,
//   a shard's over its rows, then merged in double:
//     f64  1e-11: both sides accumulate in double; only the order of the merges differs;
//     f32  1e-4: mean, variance and backward sums differ by float rounding (~1e-6 relative)
//          and dx's three terms cancel, which can lift that to ~1e-5 of dx's largest value;
//     bf16/f16 1e-2: outputs are stored with 8 (11) significant bits: a statistic that
//          differs in the sixth digit flips the rounding of some outputs by one ulp.
//   One shard through the synchronised path against none (the same Welford states, finished
//   through double): f64 1e-13, f32 1e-6, float rounding only.
inline double shard_bound_for(DType t, bool gpu) {
  if (!gpu) return t == DType::f64 ? 1e-12 : 4 * 0x1p-23;
  return t == DType::f64 ? 1e-11 : t == DType::f32 ? 1e-4 : 1e-2;
}
inline double one_shard_bound_for(DType t) { return t == DType::f64 ? 1e-13 : 1e-6; }
//
// Against f32's own error (the yardstick: the CPU's f32 run against its f64 run on the same
// quantity), for whole-model runs whose rounding a fixed bound cannot capture
// (Note [Whole-model tolerances] in tests/cuda/resnet50_cuda_test.cc):
//   error <= factor * yardstick + floor
//   kYardstickEngines      10: cuDNN's fp32 engines (Winograd and FFT round several times
//                          more than a GEMM) and float batch-norm reductions (the CPU's are
//                          double) against the CPU.
//   kYardstickIndependent  3: two runs whose errors are independent and alike (two TF32 runs
//                          differ by about sqrt(2) times either's error).
//   kYardstickFloor        1e-6: one step's gradients and updated state, for quantities f32
//                          gets almost exact (a yardstick near 0).
inline constexpr double kYardstickEngines = 10, kYardstickIndependent = 3, kYardstickFloor = 1e-6;
// Three lockstep ResNet50 steps against the CPU's f64, one bound per kind of quantity (relative
// norms; resnet50's Note gives the errors measured for each):
//   f32 floors (added to kYardstickEngines x the yardstick): loss 1e-5, logits 1e-4, a
//        stage's parameter change 5e-4, its running statistics' change 1e-4.
//   f64  (cuDNN's double engines): loss 1e-11, logits 1e-10, parameter changes 1e-9, running
//        statistics 1e-10; the CPU's own NHWC against NCHW is 6e-15..4e-13, a formula
//        difference >= 1e-4.
//   bf16 mixed precision: about 2.5x PyTorch's own bf16 error on the same case: loss 0.1,
//        logits 0.8, fc's update 0.8, running statistics 0.25; the conv stages' updates
//        (~1.1 in PyTorch's own) are printed, not checked (a negative bound).
struct ModelBounds {
  double loss, logits, fc_param, conv_param, stats;
};
inline constexpr ModelBounds kModelFloorF32{1e-5, 1e-4, 5e-4, 5e-4, 1e-4};
inline constexpr ModelBounds kModelBoundF64{1e-11, 1e-10, 1e-9, 1e-9, 1e-10};
inline constexpr ModelBounds kModelBoundBF16{0.1, 0.8, 0.8, -1.0, 0.25};
//
// Random draws on two devices from the same Generator (tests/cuda/random_cuda_test.cc): the
// integer draws, the uniforms and the affine fma are the same IEEE operations, so they match
// bit for bit (kExact). Normal deviates also call log and cos, glibc's on the host and CUDA's
// (within 1 and 2 ulp) on the GPU:
//   f64  |got - want| <= kDeviateRelF64 * |want - mean| + 1 ulp(want): the deviate to 1e-15
//        relative (~5-9 ulp), scaled by std, then the fma's rounding of slightly different
//        inputs, 1 ulp.
//   f32, bf16, f16  at most 1 ulp of the dtype, in at most kInexactFraction of the elements
//        (1e-4): the double values differ in their last bits, so their roundings differ only
//        when one lies within a few double ulps of a rounding midpoint (about 1 in 10^7 for f32).
inline constexpr double kDeviateRelF64 = 1e-15, kInexactFraction = 1e-4;

// One unit in the last place of dtype t at magnitude |v| (subnormals: the smallest step).
inline double ulp_of(double v, DType t) {
  int digits = 24, emin = -126;
  if (t == DType::f64) digits = 53, emin = -1022;
  if (t == DType::bf16) digits = 8;
  if (t == DType::f16) digits = 11, emin = -14;
  const int e = v == 0 ? emin : std::max(std::ilogb(v), emin);
  return std::ldexp(1.0, e - (digits - 1));
}

// Checks |got - want| <= tol.atol * scale + tol.rtol * |want| elementwise (want is the
// reference); reports the first mismatches with their logical index.
inline void check_close(const std::vector<double>& got, const std::vector<double>& want, Tol tol,
                        const std::string& what, double scale = 1.0) {
  REQUIRE_MESSAGE(got.size() == want.size(), what, ": ", got.size(), " vs ", want.size(), " elements");
  int bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (!(err <= tol.atol * scale + tol.rtol * std::abs(want[i]))) {  // NaN fails too
      if (bad < 8) os << "  [" << i << "] got " << got[i] << ", want " << want[i] << "\n";
      ++bad;
    }
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", got.size(), " elements differ\n", os.str());
}

inline void check_close(const Tensor& got, const std::vector<double>& want, Tol tol, const std::string& what,
                        double scale = 1.0) {
  check_close(got.to_vector<double>(), want, tol, what, scale);
}

// Values compared in logical order, whatever the two tensors' layouts and devices; both
// undefined (a gradient that is not there on either side) passes.
inline void check_close(const Tensor& got, const Tensor& want, Tol tol, const std::string& what,
                        double scale = 1.0) {
  REQUIRE_MESSAGE(got.defined() == want.defined(), what, ": one side undefined");
  if (!got.defined()) return;
  CHECK_MESSAGE(got.shape() == want.shape(), what, ": shape ", shape_str(got.shape()), " vs ",
                shape_str(want.shape()));
  check_close(got.to_vector<double>(), want.to_vector<double>(), tol, what, scale);
}

// Deterministic per-test random data.
inline Tensor rnd(const Shape& s, uint64_t seed, DType t = DType::f64, MemoryFormat f = MemoryFormat::contiguous) {
  Generator g(seed);
  return randn(s, g, t, Device::cpu(), f);
}

// A leaf copy that requires grad.
inline Tensor leaf(const Tensor& t) {
  Tensor c = t.clone();
  c.set_requires_grad(true);
  return c;
}

inline void check_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
                            const std::string& what, GradcheckOptions opt = {}) {
  const GradcheckResult r = gradcheck(f, in, opt);
  CHECK_MESSAGE(r.ok, what, ": gradcheck failed (max abs err ", r.max_abs_err, ")\n", r.message);
}

inline const char* fmt_name(MemoryFormat f) { return f == MemoryFormat::contiguous ? "NCHW" : "NHWC"; }

// The op events called `name` that one profiled run of f records (Note [Profiler scopes]):
// how an op's test checks its profiler scope and cost formula.
inline std::vector<prof::Event> op_events(const std::function<void()>& f, const std::string& name) {
  prof::start();
  f();
  std::vector<prof::Event> out;
  for (const prof::Event& e : prof::stop())
    if (e.kind == prof::EventKind::op && e.name == name) out.push_back(e);
  return out;
}

}  // namespace rt::test
