// Kernels for tests/cuda_emu/device_math_test.cc: the device's math functions applied
// elementwise, so that the test can compare what a GPU thread gets (Note [Device numerics] in
// cuda_emu/device_math.cc) with the host's libm. Launchers take device pointers.
#pragma once

#include <cstdint>

#include "kernels/cuda/stream.h"

namespace rt::emu_test {

// The functions applied, float and double.
enum class MathFn { expf, logf, powf, tanhf, fast_expf, fast_logf, fast_fdividef, rsqrtf, exp, log, pow, tanh, rsqrt };
inline constexpr MathFn kFloatFns[] = {MathFn::expf,      MathFn::logf,      MathFn::powf,          MathFn::tanhf,
                                       MathFn::fast_expf, MathFn::fast_logf, MathFn::fast_fdividef, MathFn::rsqrtf};
inline constexpr MathFn kDoubleFns[] = {MathFn::exp, MathFn::log, MathFn::pow, MathFn::tanh, MathFn::rsqrt};

// out[i] = fn(x[i]) or fn(x[i], y[i]) (powf, __fdividef, pow) for i < n.
void apply(MathFn fn, const float* x, const float* y, float* out, int n, cudaStream_t s);
void apply(MathFn fn, const double* x, const double* y, double* out, int n, cudaStream_t s);

}  // namespace rt::emu_test
