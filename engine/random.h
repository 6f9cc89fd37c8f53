// Seeded random numbers for initialisation and tests. The same seed gives the same
// values on every machine (no implementation-defined std:: distributions).
#pragma once

#include <cstdint>

#include "engine/tensor.h"

namespace rt {

class Generator {
 public:
  // splitmix64 adds this to the state before every draw, so draw k (0-based) after state s
  // is mix(s + (k + 1) * kIncrement): the CUDA fills (kernels/cuda/random.h) compute
  // each element's draws from the state alone.
  static constexpr uint64_t kIncrement = 0x9e3779b97f4a7c15ull;

  explicit Generator(uint64_t seed = 0x5eed) : state_(seed) {}
  uint64_t next_u64();                  // splitmix64
  double uniform();                     // [0, 1)
  double normal();                      // N(0, 1), Box-Muller
  int64_t randint(int64_t lo, int64_t hi);  // [lo, hi)
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }
  void skip(uint64_t draws) { state_ += draws * kIncrement; }  // as `draws` calls of next_u64()

 private:
  uint64_t state_;
};

// Element i (in logical order) is the i-th value of the host loop: fma(std, g.normal(), mean),
// fma(hi - lo, g.uniform(), lo) or g.randint(lo, hi), rounded to dtype (bf16/f16 through
// f32), stored in `format`. The CPU draws in that order. On CUDA a kernel computes
// each element from g's state (kernels/cuda/random.h) and g then skips the draws the host
// loop would have made (2 per randn element, 1 otherwise): the same values and the same
// final state on both devices (randn in double: equal up to libm vs CUDA log/cos ulps).
Tensor randn(const Shape& shape, Generator& g, DType dtype = DType::f32, Device device = Device::cpu(),
             MemoryFormat format = MemoryFormat::contiguous, double mean = 0.0, double std = 1.0);
Tensor rand_uniform(const Shape& shape, Generator& g, double lo, double hi, DType dtype = DType::f32,
                    Device device = Device::cpu(), MemoryFormat format = MemoryFormat::contiguous);
Tensor randint(const Shape& shape, Generator& g, int64_t lo, int64_t hi, Device device = Device::cpu());

}  // namespace rt
