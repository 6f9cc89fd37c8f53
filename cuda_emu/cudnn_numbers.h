// Number formats of the cuDNN fake's convolutions: bfloat16 and IEEE half to and from float
// with round-to-nearest-even, and the TF32 rounding of tensor-core inputs. Written here from
// the formats' definitions so that the fake shares no code with the engine it checks.
#pragma once

#include <cstdint>
#include <cstring>

namespace rt::emu::cudnn {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bfloat16: the top 16 bits of a float.
inline float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays a (quiet) NaN
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);                 // nearest, ties to even
}

// IEEE 754 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals below 2^-14.
inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (man << 13));  // inf, NaN
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (man << 13));
  const float m = float(man) * (1.0f / 16777216.0f);                   // man * 2^-24, exact
  return sign ? -m : m;
}
inline uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return uint16_t(sign | 0x7E00u);  // NaN
  if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {                                  // below 2^-14: subnormal or zero
    // The value in units of 2^-24, rounded to nearest even by the FPU (exact in float).
    const float units = bits_float(a) * 16777216.0f;
    const float r = units + 8388608.0f - 8388608.0f;  // nearest even integer for units < 2^23
    return uint16_t(sign | uint32_t(r));
  }
  const uint32_t e = (a >> 23) - 112, m = a & 0x7FFFFFu;
  uint32_t h = (e << 10) | (m >> 13);
  const uint32_t rest = m & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // nearest, ties to even (carries into exp)
  return uint16_t(sign | h);
}

// TF32 as tensor cores take an f32 input: 10 mantissa bits, rounded to nearest with ties
// away from zero (PTX cvt.rna.tf32.f32).
inline float round_tf32(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7F800000u) == 0x7F800000u) return f;  // inf, NaN
  return bits_float((u + 0x1000u) & ~0x1FFFu);
}

inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }
inline float round_f16(float f) { return f16_to_float(float_to_f16(f)); }

}  // namespace rt::emu::cudnn
