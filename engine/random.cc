#include "engine/random.h"

#include <cmath>
#include <vector>

#include "engine/stream.h"
#include "kernels/cuda/random.h"

namespace rt {

// kernels/cuda/random.cu repeats these constants and formulas (it cannot include this
// engine header); tests/cuda/random_cuda_test.cc checks that both give the same values.
uint64_t Generator::next_u64() {
  uint64_t z = (state_ += kIncrement);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Generator::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

int64_t Generator::randint(int64_t lo, int64_t hi) {
  RT_CHECK(hi > lo, "randint: empty range [", lo, ", ", hi, ")");
  // lo + draw % (hi - lo) in unsigned arithmetic: no overflow for ranges wider than 2^63.
  return int64_t(uint64_t(lo) + next_u64() % (uint64_t(hi) - uint64_t(lo)));
}

namespace {

// Draws numel values in logical order straight into a host tensor of `dtype` (f32 and f64
// without a detour through double buffers), then relayouts and moves it.
template <typename Draw>
Tensor draw(const Shape& shape, DType dtype, Device device, MemoryFormat format, Draw next) {
  const DType host_type = dtype == DType::f64 ? DType::f64 : DType::f32;
  Tensor host = Tensor::empty(shape, host_type);
  const int64_t n = host.numel();
  if (host_type == DType::f64) {
    double* p = host.data<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = next();
  } else {
    float* p = host.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = float(next());
  }
  return host.to(dtype).to(format).to(device);
}

// Where a CUDA fill writes logical element i (kernels/cuda/random.h).
cuda::RandomLayout layout_of(const Tensor& t) {
  if (t.format() == MemoryFormat::channels_last) return {t.size(0), t.size(1), t.size(2), t.size(3), true};
  return {t.numel(), 1, 1, 1, false};
}

cudaStream_t stream_on(Device d) { return static_cast<cudaStream_t>(Stream::current(d).handle()); }

}  // namespace

// The affine maps are written as std::fma: the same single rounding as the CUDA kernels'
// fma on every compiler (with FMA enabled GCC already contracted `mean + std * x` to it, so
// the values are unchanged).
Tensor randn(const Shape& shape, Generator& g, DType dtype, Device device, MemoryFormat format, double mean,
             double stddev) {
  if (device.is_cuda() && is_floating(dtype)) {
    Tensor y = Tensor::empty(shape, dtype, device, format);
    cuda::random_normal(g.state(), layout_of(y), mean, stddev, dtype, y.raw_data(), stream_on(device));
    g.skip(2 * uint64_t(y.numel()));  // Generator::normal draws two uniforms per value
    return y;
  }
  return draw(shape, dtype, device, format, [&] { return std::fma(stddev, g.normal(), mean); });
}

Tensor rand_uniform(const Shape& shape, Generator& g, double lo, double hi, DType dtype, Device device,
                    MemoryFormat format) {
  if (device.is_cuda() && is_floating(dtype)) {
    Tensor y = Tensor::empty(shape, dtype, device, format);
    cuda::random_uniform(g.state(), layout_of(y), lo, hi, dtype, y.raw_data(), stream_on(device));
    g.skip(uint64_t(y.numel()));
    return y;
  }
  return draw(shape, dtype, device, format, [&] { return std::fma(hi - lo, g.uniform(), lo); });
}

// No rejection sampling (draw % range), so every element takes exactly one draw and the
// CUDA kernel can compute element i from the state alone.
Tensor randint(const Shape& shape, Generator& g, int64_t lo, int64_t hi, Device device) {
  if (device.is_cuda()) {
    Tensor y = Tensor::empty(shape, DType::i64, device);
    const int64_t n = y.numel();
    if (n == 0) return y;  // no draws, so no range check either, like the host loop
    cuda::random_int(g.state(), n, lo, hi, y.data<int64_t>(), stream_on(device));
    g.skip(uint64_t(n));
    return y;
  }
  std::vector<int64_t> v(size_t(shape_numel(shape)));
  for (int64_t& x : v) x = g.randint(lo, hi);
  return Tensor::from_vector(v, shape, device);
}

}  // namespace rt
