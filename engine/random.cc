#include "engine/random.h"

#include <cmath>
#include <vector>

namespace rt {

uint64_t Generator::next_u64() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
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
  return lo + int64_t(next_u64() % uint64_t(hi - lo));
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

}  // namespace

Tensor randn(const Shape& shape, Generator& g, DType dtype, Device device, MemoryFormat format, double mean,
             double std) {
  return draw(shape, dtype, device, format, [&] { return mean + std * g.normal(); });
}

Tensor rand_uniform(const Shape& shape, Generator& g, double lo, double hi, DType dtype, Device device,
                    MemoryFormat format) {
  return draw(shape, dtype, device, format, [&] { return lo + (hi - lo) * g.uniform(); });
}

Tensor randint(const Shape& shape, Generator& g, int64_t lo, int64_t hi, Device device) {
  std::vector<int64_t> v(size_t(shape_numel(shape)));
  for (int64_t& x : v) x = g.randint(lo, hi);
  return Tensor::from_vector(v, shape, device);
}

}  // namespace rt
