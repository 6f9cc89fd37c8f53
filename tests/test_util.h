// Helpers for the op tests: random inputs, tolerant comparison with readable failures,
// and a gradcheck wrapper. Tolerances live here, per dtype, with their reasons.
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

struct Tol {
  double atol, rtol;
};
// f64: both sides compute in double; only summation order differs.
inline constexpr Tol kTolF64{1e-10, 1e-9};
// f32 against an f64 reference: GEMMs of a few thousand products accumulate ~1e-6
// relative rounding; 1e-4 leaves room for sums over whole batches (BN statistics).
inline constexpr Tol kTolF32{1e-5, 1e-4};
inline Tol tol_for(DType t) { return t == DType::f64 ? kTolF64 : kTolF32; }

// Checks |a - b| <= atol + rtol * |b| elementwise (b is the reference); reports the first
// mismatches with their logical index.
inline void check_close(const std::vector<double>& a, const std::vector<double>& b, Tol tol, const std::string& what) {
  REQUIRE_MESSAGE(a.size() == b.size(), what, ": ", a.size(), " vs ", b.size(), " elements");
  int bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - b[i]);
    if (!(err <= tol.atol + tol.rtol * std::abs(b[i]))) {  // NaN fails too
      if (bad < 5) os << "  [" << i << "] got " << a[i] << ", want " << b[i] << "\n";
      ++bad;
    }
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", a.size(), " elements differ\n", os.str());
}

inline void check_close(const Tensor& a, const std::vector<double>& b, Tol tol, const std::string& what) {
  check_close(a.to_vector<double>(), b, tol, what);
}

inline void check_close(const Tensor& a, const Tensor& b, Tol tol, const std::string& what) {
  CHECK_MESSAGE(a.shape() == b.shape(), what, ": shape ", shape_str(a.shape()), " vs ", shape_str(b.shape()));
  check_close(a.to_vector<double>(), b.to_vector<double>(), tol, what);
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
