// The kernels of device_math.h.
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.cuh"
#include "tests/cuda_emu/device_math.h"

namespace rt::emu_test {
namespace {

__device__ float call(MathFn fn, float x, float y) {
  switch (fn) {
    case MathFn::expf: return expf(x);
    case MathFn::logf: return logf(x);
    case MathFn::powf: return powf(x, y);
    case MathFn::tanhf: return tanhf(x);
    case MathFn::fast_expf: return __expf(x);
    case MathFn::fast_logf: return __logf(x);
    case MathFn::fast_fdividef: return __fdividef(x, y);
    case MathFn::rsqrtf: return rsqrtf(x);
    default: return NAN;
  }
}

__device__ double call(MathFn fn, double x, double y) {
  switch (fn) {
    case MathFn::exp: return exp(x);
    case MathFn::log: return log(x);
    case MathFn::pow: return pow(x, y);
    case MathFn::tanh: return tanh(x);
    case MathFn::rsqrt: return rsqrt(x);
    default: return NAN;
  }
}

template <typename T>
__global__ void apply_kernel(MathFn fn, const T* x, const T* y, T* out, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = call(fn, x[i], y[i]);
}

template <typename T>
void apply_impl(MathFn fn, const T* x, const T* y, T* out, int n, cudaStream_t s) {
  RT_LAUNCH((n + 127) / 128, 128, 0, s, apply_kernel<T>)(fn, x, y, out, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void apply(MathFn fn, const float* x, const float* y, float* out, int n, cudaStream_t s) {
  apply_impl(fn, x, y, out, n, s);
}
void apply(MathFn fn, const double* x, const double* y, double* out, int n, cudaStream_t s) {
  apply_impl(fn, x, y, out, n, s);
}

}  // namespace rt::emu_test
