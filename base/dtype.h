// Element types. f32 is the compute type; f64 exists on the CPU for gradient checks;
// bf16 and f16 are storage types (mixed precision keeps fp32 masters); i32/i64/u8 hold
// indices, labels and images.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace rt {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, u8 };
inline constexpr int kNumDTypes = 7;

inline constexpr const char* kDTypeNames[] = {"f32", "f64", "bf16", "f16", "i32", "i64", "u8"};
inline constexpr size_t kDTypeSizes[] = {4, 8, 2, 2, 4, 8, 1};
static_assert(sizeof(kDTypeNames) / sizeof(kDTypeNames[0]) == kNumDTypes, "name table");
static_assert(sizeof(kDTypeSizes) / sizeof(kDTypeSizes[0]) == kNumDTypes, "size table");

inline const char* dtype_name(DType t) { return kDTypeNames[static_cast<int>(t)]; }
inline size_t dtype_size(DType t) { return kDTypeSizes[static_cast<int>(t)]; }
inline bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16; }

// C++ type -> DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };

// bf16 / f16 <-> f32 on the host, round-to-nearest-even like the hardware converts.
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace rt
