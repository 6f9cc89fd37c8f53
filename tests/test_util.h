// Helpers for the op tests, CPU and GPU alike: the one table of tolerances (Note [Tolerances]),
// random inputs, tolerant comparison with readable failures, and a gradcheck wrapper. The
// GPU-vs-CPU harness (tests/cuda/cuda_test_util.h) builds on these.
#pragma once

#include <doctest/doctest.h>

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
