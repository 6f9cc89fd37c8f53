// Reductions of the NCCL fake (nccl_reduce.h).
//
// Note [Reduction order and rounding]
// - Order: every rank reduces the N inputs in rank order, 0 first. NCCL's ring reduces each
//   chunk in ring order starting at a different rank per chunk; either way each element
//   gets one value on every rank. The fake's fixed order makes results deterministic and
//   identical on all ranks, and the test's host reference easy to state.
// - Rounding: each step is rounded to the type, as NCCL's kernels do (f16 and bf16 through
//   __hadd / __hmul: one correctly rounded operation per step, no wider accumulator). A
//   step here is computed in float and rounded once to the 16-bit type; the float sum or
//   product of two 16-bit values, rounded again to 16 bits, is the correctly rounded
//   result (float carries more than 2p + 2 bits for p = 11 and p = 8), so it equals the
//   GPU's bit for bit. The BUILD target compiles this file with -ffp-contract=off: a fused
//   multiply-add would skip the rounding between ncclAvg's scaling and its sum.
// - ncclAvg, as NCCL's PreMulSum for floating types: each input times 1/N, where 1/N is
//   rounded to the type (through float for f16 and bf16), then summed; for integer types
//   the sum divided by N, truncating (NCCL's SumPostDiv).
// - ncclMax / ncclMin of floating types: a NaN loses against a number (fmaxf / fminf,
//   __hmax / __hmin), as in NCCL. Integer sums and products wrap around.
#include "cuda_emu/nccl_reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cuda_emu/nccl_common.h"

namespace rt::emu::nccl {
namespace {

// A type's storage S and the type C its steps are computed in.
template <class T>
struct Native {
  using S = T;
  using C = T;
  static constexpr bool floating = std::is_floating_point_v<T>;
  static C load(S s) { return s; }
  static S store(C c) { return c; }
};
struct Half {
  using S = uint16_t;
  using C = float;
  static constexpr bool floating = true;
  static C load(S s) { return half_to_float(s); }
  static S store(C c) { return float_to_half(c); }
};
struct BFloat16 {
  using S = uint16_t;
  using C = float;
  static constexpr bool floating = true;
  static C load(S s) { return bf16_to_float(s); }
  static S store(C c) { return float_to_bf16(c); }
};

template <class C, ncclRedOp_t Op>
C combine(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if constexpr (Op == ncclSum || Op == ncclAvg) return a + b;
    if constexpr (Op == ncclProd) return a * b;
    if constexpr (Op == ncclMax) return std::fmax(a, b);
    if constexpr (Op == ncclMin) return std::fmin(a, b);
  } else {
    using U = std::make_unsigned_t<C>;  // wraps around instead of overflowing
    if constexpr (Op == ncclSum || Op == ncclAvg) return C(U(U(a) + U(b)));
    if constexpr (Op == ncclProd) return C(U(U(a) * U(b)));
    if constexpr (Op == ncclMax) return std::max(a, b);
    if constexpr (Op == ncclMin) return std::min(a, b);
  }
}

template <class Tr, ncclRedOp_t Op>
void reduce(int n, const void* const* in, void* out, size_t count) {
  using S = typename Tr::S;
  using C = typename Tr::C;
  std::vector<const S*> x(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) x[size_t(r)] = static_cast<const S*>(in[r]);
  S* y = static_cast<S*>(out);
  constexpr bool premul = Op == ncclAvg && Tr::floating;
  const C scale = Tr::load(Tr::store(C(1.0 / n)));
  auto pre = [&](S v) -> S {
    if constexpr (premul) return Tr::store(Tr::load(v) * scale);
    return v;
  };
  for (size_t i = 0; i < count; ++i) {
    S acc = pre(x[0][i]);
    for (int r = 1; r < n; ++r) acc = Tr::store(combine<C, Op>(Tr::load(acc), Tr::load(pre(x[size_t(r)][i]))));
    if constexpr (Op == ncclAvg && !Tr::floating) acc = S(acc / S(n));
    y[i] = acc;  // after every read of element i: `out` may be an input
  }
}

template <class Tr>
void by_op(ncclRedOp_t op, int n, const void* const* in, void* out, size_t count) {
  switch (op) {
    case ncclSum: return reduce<Tr, ncclSum>(n, in, out, count);
    case ncclProd: return reduce<Tr, ncclProd>(n, in, out, count);
    case ncclMax: return reduce<Tr, ncclMax>(n, in, out, count);
    case ncclMin: return reduce<Tr, ncclMin>(n, in, out, count);
    case ncclAvg: return reduce<Tr, ncclAvg>(n, in, out, count);
    default: throw Error(ncclInvalidArgument, std::string("cannot reduce with ") + op_name(op));
  }
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

void reduce_in_rank_order(ncclDataType_t t, ncclRedOp_t op, int n, const void* const* in, void* out, size_t count) {
  switch (t) {
    case ncclInt8: return by_op<Native<int8_t>>(op, n, in, out, count);
    case ncclUint8: return by_op<Native<uint8_t>>(op, n, in, out, count);
    case ncclInt32: return by_op<Native<int32_t>>(op, n, in, out, count);
    case ncclUint32: return by_op<Native<uint32_t>>(op, n, in, out, count);
    case ncclInt64: return by_op<Native<int64_t>>(op, n, in, out, count);
    case ncclUint64: return by_op<Native<uint64_t>>(op, n, in, out, count);
    case ncclFloat16: return by_op<Half>(op, n, in, out, count);
    case ncclFloat32: return by_op<Native<float>>(op, n, in, out, count);
    case ncclFloat64: return by_op<Native<double>>(op, n, in, out, count);
    case ncclBfloat16: return by_op<BFloat16>(op, n, in, out, count);
    default:
      throw Error(ncclInvalidArgument, std::string("the NCCL fake does not reduce ") + type_name(t) +
                                           " (it moves fp8 data but does not compute with it)");
  }
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) return from_bits(sign | bits(std::ldexp(float(m), -24)));  // zero or subnormal
  if (e == 31) return from_bits(sign | 0x7f800000u | (m << 13));        // inf or NaN
  return from_bits(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t float_to_half(float f) {
  const uint32_t x = bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00 | ((a >> 13) & 0x1ff));  // NaN stays a quiet NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // 65520 and above round to infinity
  if (a >= 0x38800000u) {                                 // normal: rebias, round 23 -> 10 bits
    const uint32_t r = a - (112u << 23);
    return uint16_t(sign | ((r + 0xfffu + ((r >> 13) & 1)) >> 13));
  }
  // Subnormal (or zero): k * 2^-24 with k = |f| * 2^24 rounded to nearest even.
  const uint32_t e = a >> 23;
  if (e < 102) return sign;  // below 2^-25: rounds to zero
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t k = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (k & 1))) ++k;
  return uint16_t(sign | k);
}

float bf16_to_float(uint16_t b) { return from_bits(uint32_t(b) << 16); }

uint16_t float_to_bf16(float f) {
  const uint32_t x = bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // a quiet NaN
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

}  // namespace rt::emu::nccl
