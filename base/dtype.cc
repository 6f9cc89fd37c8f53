#include "base/dtype.h"

namespace rt {

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; man <<= 1; } while (!(man & 0x400u));
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00 : 0x7c00);  // NaN / Inf
  if (abs >= 0x477ff000u) return sign | 0x7c00;                              // overflow -> Inf
  if (abs < 0x38800000u) {                                                    // subnormal or zero
    if (abs < 0x33000000u) return sign;
    const uint32_t shift = 126 - (abs >> 23);  // f16 subnormal = half * 2^-24
    const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    uint32_t half = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return sign | uint16_t(half);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15 (in place, shifted by 13)
  r += 0xfffu + ((r >> 13) & 1u);   // round to nearest even
  return sign | uint16_t(r >> 13);
}

}  // namespace rt
