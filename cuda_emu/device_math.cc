// The device's math library as a GPU computes it: within its documented error, not exactly.
//
// Note [Device numerics]
// Kernels compiled as C++ call the host's libm, which is correctly rounded or nearly so,
// while the device's functions have documented maximum errors (CUDA C++ Programming Guide,
// "Mathematical Functions": the tables of maximum ulp error of the single- and
// double-precision standard functions, and of the intrinsics). A GPU-vs-CPU tolerance that
// passes against the host's exact results may then fail on a GPU. With
// RINGTAPE_EMU_MATH=ulp (CI's kernel runs set it, .ci/run) every such function called
// from a GPU thread returns, instead of the exact result, a value chosen among those the
// guide allows: the floating-point numbers within its maximum error of the exact result
// (computed in long double), one of them picked by a hash of RINGTAPE_EMU_SEED, the
// function and the argument bits. So a function is deterministic in its argument, as a
// device's implementation is, and another seed is another implementation within the same
// bounds. The guide's special values stay exact (an exact result of 0 or of infinity, a
// NaN), and no result changes sign. Host code (the CPU reference, the library fakes) is
// never perturbed: the wrappers look at whether the calling thread is a GPU thread
// (tls_thread).
//
// How calls get here: the intrinsics (__expf, __logf, __fdividef, rsqrtf, ...) are defined
// in simt.h and call device_fn; the standard functions (expf, logf, powf, tanhf, exp, ...)
// are libm's symbols, and the emulated build links every program with -Wl,--wrap for each
// (cuda_emu/BUILD), so a call from any object of the program reaches __wrap_NAME below,
// which perturbs on a GPU thread and calls libm's (__real_NAME) otherwise. sqrtf, sqrt and
// the division operator are correctly rounded on the device by default (nvcc's
// -prec-sqrt=true, -prec-div=true, which tools/cuda.bzl keeps), so they are not perturbed.
// Not covered: a call GCC expands inline (a constant argument folded at compile time), and
// half-precision intrinsics (no kernel uses them).
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cuda_emu/emu.h"
#include "cuda_emu/executor.h"
#include "cuda_emu/internal.h"

namespace rt::emu {
namespace {

std::atomic<int>& mode() {
  static std::atomic<int> m{[] {
    const char* v = std::getenv("RINGTAPE_EMU_MATH");
    if (!v || !*v || std::strcmp(v, "exact") == 0) return int(DeviceMath::exact);
    if (std::strcmp(v, "ulp") == 0) return int(DeviceMath::ulp);
    std::fprintf(stderr, "cuda-emu: RINGTAPE_EMU_MATH='%s' is not 'exact' or 'ulp' (docs/cuda-on-cpu.md)\n", v);
    std::_Exit(2);
  }()};
  return m;
}

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Floating-point numbers in order as integers (the negative ones mirrored), so that the
// numbers between two are the integers between their ordinals.
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
template <typename T>
int64_t ordinal(T f) {
  Bits<T> b;
  std::memcpy(&b, &f, sizeof f);
  return b >= 0 ? int64_t(b) : -int64_t(b & std::numeric_limits<Bits<T>>::max());
}
template <typename T>
T from_ordinal(int64_t o) {
  using U = std::make_unsigned_t<Bits<T>>;
  const Bits<T> b = o >= 0 ? Bits<T>(o) : Bits<T>(U(-o) | (U(1) << (8 * sizeof(T) - 1)));
  T f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// One ulp of T at the exact value t: the spacing of T's numbers in t's binade.
template <typename T>
long double ulp_at(long double t) {
  constexpr int kDigits = std::numeric_limits<T>::digits;  // 24, 53
  const long double a = std::fabs(t);
  if (a < std::numeric_limits<T>::min()) return std::ldexp(1.0L, std::numeric_limits<T>::min_exponent - kDigits);
  return std::ldexp(1.0L, std::ilogb(a) + 1 - kDigits);
}

// A T within `ulps` ulps of the exact value t, picked by hash h among all such, of t's sign.
// An exact 0 stays 0, its sign kept: the guide's special values (expf(-inf) = +0, sinf(+-0) =
// +-0, logf(1) = +0, tanhf(+-0) = +-0, ...) are exact on the device, and a result near the
// smallest subnormal never crosses 0 (a device's exp is never negative).
template <typename T>
T within(long double t, long double ulps, uint64_t h) {
  const T nearest = T(t);
  if (!std::isfinite(t) || !std::isfinite(nearest) || ulps <= 0 || t == 0) return nearest;
  const long double bound = ulps * ulp_at<T>(t);
  const bool negative = std::signbit(t);
  const auto keeps = [&](T next) { return std::isfinite(next) && std::signbit(next) == negative; };
  T lo = nearest, hi = nearest;
  constexpr T kInf = std::numeric_limits<T>::infinity();
  for (T next = std::nextafter(lo, -kInf); keeps(next) && t - next <= bound; next = std::nextafter(lo, -kInf))
    lo = next;
  for (T next = std::nextafter(hi, kInf); keeps(next) && next - t <= bound; next = std::nextafter(hi, kInf)) hi = next;
  const int64_t first = ordinal(lo), count = ordinal(hi) - first + 1;
  return std::copysign(from_ordinal<T>(first + int64_t(h % uint64_t(count))),
                       T(negative ? -1 : 1));  // -0's ordinal is +0's
}

template <typename T>
uint64_t bits_of(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}

}  // namespace

DeviceMath device_math() { return DeviceMath(mode().load(std::memory_order_relaxed)); }
void set_device_math(DeviceMath m) { mode().store(int(m)); }

namespace {

bool perturbing() { return tls_thread != nullptr && device_math() == DeviceMath::ulp; }

float perturbed(DeviceFn fn, long double exact, long double ulps, float x, float y) {
  const uint64_t h = mix(env_seed() ^ mix(uint64_t(fn) * 0x9e3779b97f4a7c15ULL ^ bits_of(x) ^ (bits_of(y) << 32)));
  return within<float>(exact, ulps, h);
}
double perturbed(DeviceFn fn, long double exact, long double ulps, double x, double y) {
  const uint64_t h = mix(env_seed() ^ mix(uint64_t(fn) * 0x9e3779b97f4a7c15ULL ^ bits_of(x) ^ mix(bits_of(y))));
  return within<double>(exact, ulps, h);
}

}  // namespace

// The documented maximum errors (ulps), and the intrinsics' rules.
float device_fn(DeviceFn fn, float x, float y) {
  switch (fn) {
    case DeviceFn::fast_expf: {  // 2 + floor(abs(1.173 * x)) ulp
      const float r = std::exp(x);
      return perturbing() ? perturbed(fn, std::exp((long double)x), 2 + std::floor(std::fabs(1.173L * x)), x, 0) : r;
    }
    case DeviceFn::fast_logf: {  // x in [0.5, 2]: absolute error 2^-21.41; else 3 ulp
      const float r = std::log(x);
      if (!perturbing() || !(x > 0)) return r;
      const long double t = std::log((long double)x);
      const long double ulps = x >= 0.5f && x <= 2.0f ? std::exp2(-21.41L) / ulp_at<float>(t) : 3;
      return perturbed(fn, t, ulps, x, 0);
    }
    case DeviceFn::fast_fdividef: {  // 2 ulp for |y| in [2^-126, 2^126]
      const float r = x / y;
      const float ay = std::fabs(y);
      if (!perturbing() || !(ay >= 0x1p-126f && ay <= 0x1p126f)) return r;
      return perturbed(fn, (long double)x / y, 2, x, y);
    }
    case DeviceFn::rsqrtf: {  // 2 ulp
      const float r = 1.0f / std::sqrt(x);
      return perturbing() && x > 0 ? perturbed(fn, 1.0L / std::sqrt((long double)x), 2, x, 0) : r;
    }
    default:
      std::abort();  // a double function through the float entry: a bug in simt.h
  }
}

double device_fn(DeviceFn fn, double x, double) {
  switch (fn) {
    case DeviceFn::rsqrt: {  // 1 ulp
      const double r = 1.0 / std::sqrt(x);
      return perturbing() && x > 0 ? perturbed(fn, 1.0L / std::sqrt((long double)x), 1, x, 0.0) : r;
    }
    default:
      std::abort();
  }
}

}  // namespace rt::emu

// ---- libm's functions, wrapped (-Wl,--wrap=NAME, cuda_emu/BUILD) ---------------------------------
// Each: libm's result off a GPU thread or with the mode off; else a value within the guide's
// maximum error for the function (single precision: expf 2, logf 1, powf 4, tanhf 2, sinf
// and cosf 2, erff 2, log1pf 1, expm1f 1 ulp; double: exp 1, log 1, pow 2, tanh 1, sin and
// cos 2, erf 2, log1p 1, expm1 1 ulp).
using rt::emu::DeviceFn;
using rt::emu::perturbed;
using rt::emu::perturbing;

#define RT_EMU_WRAP1(T, name, lname, ulps)                                                 \
  extern "C" T __real_##name(T);                                                          \
  extern "C" T __wrap_##name(T x) {                                                       \
    const T r = __real_##name(x);                                                         \
    if (!perturbing() || !std::isfinite(r)) return r;                                     \
    return perturbed(DeviceFn::name, lname((long double)x), ulps, x, T(0));               \
  }
#define RT_EMU_WRAP2(T, name, lname, ulps)                                                 \
  extern "C" T __real_##name(T, T);                                                       \
  extern "C" T __wrap_##name(T x, T y) {                                                  \
    const T r = __real_##name(x, y);                                                      \
    if (!perturbing() || !std::isfinite(r)) return r;                                     \
    return perturbed(DeviceFn::name, lname((long double)x, (long double)y), ulps, x, y);  \
  }

RT_EMU_WRAP1(float, expf, expl, 2)
RT_EMU_WRAP1(float, logf, logl, 1)
RT_EMU_WRAP1(float, tanhf, tanhl, 2)
RT_EMU_WRAP1(float, sinf, sinl, 2)
RT_EMU_WRAP1(float, cosf, cosl, 2)
RT_EMU_WRAP1(float, erff, erfl, 2)
RT_EMU_WRAP1(float, log1pf, log1pl, 1)
RT_EMU_WRAP1(float, expm1f, expm1l, 1)
RT_EMU_WRAP2(float, powf, powl, 4)
RT_EMU_WRAP1(double, exp, expl, 1)
RT_EMU_WRAP1(double, log, logl, 1)
RT_EMU_WRAP1(double, tanh, tanhl, 1)
RT_EMU_WRAP1(double, sin, sinl, 2)
RT_EMU_WRAP1(double, cos, cosl, 2)
RT_EMU_WRAP1(double, erf, erfl, 2)
RT_EMU_WRAP1(double, log1p, log1pl, 1)
RT_EMU_WRAP1(double, expm1, expm1l, 1)
RT_EMU_WRAP2(double, pow, powl, 2)
