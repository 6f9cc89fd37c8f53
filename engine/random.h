// Seeded random numbers for initialisation and tests. The same seed gives the same
// values on every machine (no implementation-defined std:: distributions).
#pragma once

#include <cstdint>

#include "engine/tensor.h"

namespace rt {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : state_(seed) {}
  uint64_t next_u64();                  // splitmix64
  double uniform();                     // [0, 1)
  double normal();                      // N(0, 1), Box-Muller
  int64_t randint(int64_t lo, int64_t hi);  // [lo, hi)
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

// Values drawn on the host in logical order, then placed on `device` in `format`.
Tensor randn(const Shape& shape, Generator& g, DType dtype = DType::f32, Device device = Device::cpu(),
             MemoryFormat format = MemoryFormat::contiguous, double mean = 0.0, double std = 1.0);
Tensor rand_uniform(const Shape& shape, Generator& g, double lo, double hi, DType dtype = DType::f32,
                    Device device = Device::cpu(), MemoryFormat format = MemoryFormat::contiguous);
Tensor randint(const Shape& shape, Generator& g, int64_t lo, int64_t hi, Device device = Device::cpu());

}  // namespace rt
