// The device's math library under --config=cuda-emu (Note [Device numerics] in
// cuda_emu/device_math.cc): exact by default (a GPU thread gets libm's result bit for bit);
// with the ulp mode every result lies within the CUDA Programming Guide's maximum error for
// its function, many differ from the correctly rounded value (the mode does perturb), a
// function is deterministic in its argument, and host code still gets libm's result.
// Outside --config=cuda-emu the test says SKIPPED.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/cuda_emu/device_math.h"

#if RINGTAPE_CUDA_EMU
#include "cuda_emu/emu.h"

namespace {

using rt::emu_test::MathFn;

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n;
  explicit Dev(const std::vector<T>& v) : n(v.size()) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
};

const char* name(MathFn f) {
  static const char* names[] = {"expf", "logf", "powf", "tanhf", "__expf", "__logf", "__fdividef",
                                "rsqrtf", "exp", "log", "pow", "tanh", "rsqrt"};
  return names[int(f)];
}

// Arguments where each function is finite and not at a special value.
template <typename T>
void arguments(MathFn f, uint32_t seed, std::vector<T>& x, std::vector<T>& y) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> wide(-20, 20), pos(1e-3, 50), near_one(0.5, 2), base(0.1, 4), power(-3, 3);
  for (size_t i = 0; i < x.size(); ++i) {
    switch (f) {
      case MathFn::logf: case MathFn::log: case MathFn::rsqrtf: case MathFn::rsqrt:
        x[i] = T(pos(g)); y[i] = 0; break;
      case MathFn::fast_logf:  // both of its rules: [0.5, 2] and outside
        x[i] = T(i % 2 ? near_one(g) : pos(g)); y[i] = 0; break;
      case MathFn::powf: case MathFn::pow:
        x[i] = T(base(g)); y[i] = T(power(g)); break;
      case MathFn::fast_fdividef:
        x[i] = T(wide(g)); y[i] = T(pos(g) * (i % 2 ? 1 : -1)); break;
      default:
        x[i] = T(wide(g)); y[i] = 0;
    }
  }
}

// What f computes, in V: long double for the exact value, the dtype itself for the host's own
// result (libm, or the formula the emulator computes an intrinsic with).
template <typename V>
V reference(MathFn f, V x, V y) {
  switch (f) {
    case MathFn::expf: case MathFn::fast_expf: case MathFn::exp: return std::exp(x);
    case MathFn::logf: case MathFn::fast_logf: case MathFn::log: return std::log(x);
    case MathFn::powf: case MathFn::pow: return std::pow(x, y);
    case MathFn::tanhf: case MathFn::tanh: return std::tanh(x);
    case MathFn::fast_fdividef: return x / y;
    case MathFn::rsqrtf: case MathFn::rsqrt: return V(1) / std::sqrt(x);
  }
  return NAN;
}

// The guide's maximum error of f at x, in ulps of the result t (the intrinsics' absolute
// errors converted).
template <typename T>
long double allowed(MathFn f, T x, long double ulp) {
  switch (f) {
    case MathFn::expf: case MathFn::tanhf: case MathFn::rsqrtf: case MathFn::fast_fdividef: return 2;
    case MathFn::logf: case MathFn::exp: case MathFn::log: case MathFn::tanh: case MathFn::rsqrt: return 1;
    case MathFn::powf: return 4;
    case MathFn::pow: return 2;
    case MathFn::fast_expf: return 2 + std::floor(std::fabs(1.173L * x));
    case MathFn::fast_logf: return x >= T(0.5) && x <= T(2) ? std::exp2(-21.41L) / ulp : 3;
  }
  return 0;
}

template <typename T>
long double ulp_at(long double t) {
  const long double a = std::fabs(t);
  constexpr int d = std::numeric_limits<T>::digits;
  if (a < std::numeric_limits<T>::min()) return std::ldexp(1.0L, std::numeric_limits<T>::min_exponent - d);
  return std::ldexp(1.0L, std::ilogb(a) + 1 - d);
}

template <typename T>
std::vector<T> run(MathFn f, const std::vector<T>& x, const std::vector<T>& y) {
  Dev<T> dx(x), dy(y), out(std::vector<T>(x.size(), T(0)));
  rt::emu_test::apply(f, dx.p, dy.p, out.p, int(x.size()), nullptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return out.get();
}

template <typename T, size_t N>
void check_exact(const MathFn (&fns)[N]) {
  for (MathFn f : fns) {
    std::vector<T> x(512), y(512);
    arguments(f, 11, x, y);
    const std::vector<T> got = run(f, x, y);
    int differ = 0;
    for (size_t i = 0; i < x.size(); ++i) differ += got[i] != reference(f, x[i], y[i]);
    CHECK_MESSAGE(differ == 0, std::string(name(f)), ": ", differ,
                  " results differ from the host's with the mode exact");
  }
}

template <typename T, size_t N>
void check_within(const MathFn (&fns)[N], uint32_t seed) {
  for (MathFn f : fns) {
    std::vector<T> x(4096), y(4096);
    arguments(f, seed, x, y);
    const std::vector<T> got = run(f, x, y), again = run(f, x, y);
    int off_nearest = 0, worst_at = -1;
    long double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const long double t = reference<long double>(f, x[i], y[i]), ulp = ulp_at<T>(t);
      const long double err = std::fabs(got[i] - t) / ulp, bound = allowed(f, x[i], ulp);
      if (err / bound > worst) worst = err / bound, worst_at = int(i);
      off_nearest += got[i] != T(t);
      REQUIRE_MESSAGE(got[i] == again[i], std::string(name(f)), "(", x[i], "): ", got[i], " then ", again[i],
                      ": a function must be deterministic in its argument");
    }
    INFO(std::string(name(f)), ": worst error ", double(worst), " of the bound at x = ", double(x[worst_at]));
    CHECK(worst <= 1);
    // Perturbed: a fair share of the results are not the correctly rounded value. (rsqrt in
    // double and the functions with 1 ulp pick between the two neighbours of the truth.)
    CHECK_MESSAGE(off_nearest > int(x.size()) / 8, std::string(name(f)), ": only ", off_nearest, " of ", x.size(),
                  " results differ from the correctly rounded one");
  }
}

// Sets the mode for one test case; the process's own (RINGTAPE_EMU_MATH) comes back after.
struct Mode {
  rt::emu::DeviceMath was = rt::emu::device_math();
  explicit Mode(rt::emu::DeviceMath m) { rt::emu::set_device_math(m); }
  ~Mode() { rt::emu::set_device_math(was); }
};

TEST_CASE("the device's math functions are the host's exactly with the mode exact (the default)") {
  const Mode exact(rt::emu::DeviceMath::exact);
  check_exact<float>(rt::emu_test::kFloatFns);
  check_exact<double>(rt::emu_test::kDoubleFns);
}

TEST_CASE("with the ulp mode each function stays within the documented error, perturbed and deterministic") {
  const Mode ulp(rt::emu::DeviceMath::ulp);
  check_within<float>(rt::emu_test::kFloatFns, 21);
  check_within<double>(rt::emu_test::kDoubleFns, 22);
  // Host code is never perturbed: libm's result, whatever the mode.
  volatile float v = 1.25f;
  const float on_host = std::exp(float(v));
  const Mode exact(rt::emu::DeviceMath::exact);
  CHECK(std::exp(float(v)) == on_host);
}

// The guide's special values are exact on the device, and no result changes sign: exp of
// -inf is +0 (a softmax's masked entry is exactly 0), exp of an argument whose exact result is
// below the smallest subnormal is +0 or a positive subnormal, never negative, whatever the seed.
TEST_CASE("with the ulp mode special values are exact and results keep their sign") {
  const Mode ulp(rt::emu::DeviceMath::ulp);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-inf, -103.5f, -104.0f, -110.0f, -200.0f, 0.0f};
  for (float k = -103.9f; k < -103.0f; k += 0.01f) x.push_back(k);  // results of 1-3 subnormal steps
  for (MathFn f : {MathFn::expf, MathFn::fast_expf}) {
    const std::vector<float> got = run(f, x, std::vector<float>(x.size(), 0.0f));
    CHECK_MESSAGE((got[0] == 0.0f && !std::signbit(got[0])), std::string(name(f)), "(-inf) = ", got[0]);
    for (size_t i = 1; i < x.size(); ++i)
      CHECK_MESSAGE(!std::signbit(got[i]), std::string(name(f)), "(", x[i], ") = ", got[i]);
  }
  const std::vector<float> zeros = {0.0f, -0.0f}, logs = {1.0f, 1.0f};
  const std::vector<float> t = run(MathFn::tanhf, zeros, zeros), l = run(MathFn::logf, logs, zeros);
  CHECK((t[0] == 0.0f && !std::signbit(t[0]) && t[1] == 0.0f && std::signbit(t[1])));
  CHECK((l[0] == 0.0f && !std::signbit(l[0])));
}

}  // namespace

#else
TEST_CASE("device math (--config=cuda-emu only)") { std::printf("SKIPPED: not built with --config=cuda-emu\n"); }
#endif
