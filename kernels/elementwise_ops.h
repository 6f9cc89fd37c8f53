// The one table of elementwise ops, shared by the CPU backend (kernels/cpu/elementwise.cc),
// the CUDA backend (kernels/cuda/elementwise.cu) and the engine (engine/ops/elementwise.cc).
// Compiled by the C++ compiler and by nvcc (host and device).
//
// Note [Elementwise op table]
// Each op is a struct holding its scalar math, forward and backward, as RT_HOST_DEVICE
// functions of the compute type A (float for f32, bf16 and f16; double for f64), and what
// its backward reads. RT_EW_UNARY_OPS / RT_EW_BINARY_OPS list them once; the enums, the
// names and the dispatch (visit) are generated from these lists, and both backends
// instantiate their loops and kernels for every entry through visit. An op therefore exists
// in both backends or in neither: an entry whose struct lacks a formula fails to compile on
// both sides. Adding an op: its struct below, one line in the list, and its public function
// in engine/ops/elementwise.cc (declared in engine/ops.h).
//
//   unary:  y = fwd(x, p)              dx = bwd(x, y, dy, p)      (p: the op's scalar, pow's power)
//   binary: y = fwd(a, b)              da = da(a, b, y, dy)       db = db(a, b, y, dy)
//
// kUses (unary) / kDaUses, kDbUses (binary): the values a backward formula reads besides dy
// (bits kX = kA, kB, kY). The engine saves exactly those tensors for the backward, and the
// kernels load exactly those: an unused argument is never read and may be null.
// kDaIsDy / kDbIsDy: that gradient is dy itself (no kernel runs for it); kDbIsDa: db equals
// da (computed once). kFlops / kBwdFlops: per element, for the profiler (a transcendental
// counts as one).
#pragma once

#include <cmath>
#include <cstdint>

#include "base/error.h"

#ifdef __CUDACC__
#define RT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define RT_HOST_DEVICE inline
#endif

namespace rt::ew {

// Bits of what a backward reads; also the inputs' positions in the kernels' (a or x, b, y,
// dy) argument lists.
inline constexpr unsigned kA = 1, kX = kA, kB = 2, kY = 4, kDy = 8;

// The math library in both compilers' spellings: float in, float out (no silent double).
namespace math {
RT_HOST_DEVICE float exp(float v) { return ::expf(v); }
RT_HOST_DEVICE double exp(double v) { return ::exp(v); }
RT_HOST_DEVICE float log(float v) { return ::logf(v); }
RT_HOST_DEVICE double log(double v) { return ::log(v); }
RT_HOST_DEVICE float sqrt(float v) { return ::sqrtf(v); }
RT_HOST_DEVICE double sqrt(double v) { return ::sqrt(v); }
RT_HOST_DEVICE float tanh(float v) { return ::tanhf(v); }
RT_HOST_DEVICE double tanh(double v) { return ::tanh(v); }
RT_HOST_DEVICE float pow(float v, float p) { return ::powf(v, p); }
RT_HOST_DEVICE double pow(double v, double p) { return ::pow(v, p); }
}  // namespace math

// ---- unary ops -------------------------------------------------------------------------

struct Relu {  // NaN stays NaN (x < 0 is false), like std::max(x, 0) and PyTorch
  static constexpr unsigned kUses = kY;
  static constexpr double kFlops = 1, kBwdFlops = 1;
  template <typename A> RT_HOST_DEVICE static A fwd(A x, A) { return x < A(0) ? A(0) : x; }
  template <typename A> RT_HOST_DEVICE static A bwd(A, A y, A dy, A) { return y > A(0) ? dy : A(0); }
};
struct Square {
  static constexpr unsigned kUses = kX;
  static constexpr double kFlops = 1, kBwdFlops = 2;
  template <typename A> RT_HOST_DEVICE static A fwd(A x, A) { return x * x; }
  template <typename A> RT_HOST_DEVICE static A bwd(A x, A, A dy, A) { return dy * x * A(2); }
};
struct Sqrt {
  static constexpr unsigned kUses = kY;
  static constexpr double kFlops = 1, kBwdFlops = 2;
  template <typename A> RT_HOST_DEVICE static A fwd(A x, A) { return math::sqrt(x); }
  template <typename A> RT_HOST_DEVICE static A bwd(A, A y, A dy, A) { return dy / (A(2) * y); }
};
struct Exp {
  static constexpr unsigned kUses = kY;
  static constexpr double kFlops = 1, kBwdFlops = 1;
  template <typename A> RT_HOST_DEVICE static A fwd(A x, A) { return math::exp(x); }
  template <typename A> RT_HOST_DEVICE static A bwd(A, A y, A dy, A) { return dy * y; }
};
struct Log {
  static constexpr unsigned kUses = kX;
  static constexpr double kFlops = 1, kBwdFlops = 1;
  template <typename A> RT_HOST_DEVICE static A fwd(A x, A) { return math::log(x); }
  template <typename A> RT_HOST_DEVICE static A bwd(A x, A, A dy, A) { return dy / x; }
};
struct Sigmoid {
  static constexpr unsigned kUses = kY;
  static constexpr double kFlops = 3, kBwdFlops = 3;
  template <typename A> RT_HOST_DEVICE static A fwd(A x, A) { return A(1) / (A(1) + math::exp(-x)); }
  template <typename A> RT_HOST_DEVICE static A bwd(A, A y, A dy, A) { return dy * y * (A(1) - y); }
};
struct Tanh {
  static constexpr unsigned kUses = kY;
  static constexpr double kFlops = 1, kBwdFlops = 3;
  template <typename A> RT_HOST_DEVICE static A fwd(A x, A) { return math::tanh(x); }
  template <typename A> RT_HOST_DEVICE static A bwd(A, A y, A dy, A) { return dy * (A(1) - y * y); }
};
struct Neg {
  static constexpr unsigned kUses = 0;
  static constexpr double kFlops = 1, kBwdFlops = 1;
  template <typename A> RT_HOST_DEVICE static A fwd(A x, A) { return -x; }
  template <typename A> RT_HOST_DEVICE static A bwd(A, A, A dy, A) { return -dy; }
};
struct Silu {  // x * sigmoid(x), written as PyTorch does
  static constexpr unsigned kUses = kX;
  static constexpr double kFlops = 4, kBwdFlops = 8;
  template <typename A> RT_HOST_DEVICE static A fwd(A x, A) { return x / (A(1) + math::exp(-x)); }
  template <typename A> RT_HOST_DEVICE static A bwd(A x, A, A dy, A) {
    const A s = A(1) / (A(1) + math::exp(-x));
    return dy * s * (A(1) + x * (A(1) - s));
  }
};
struct Pow {  // x^p for a scalar p; the gradient of x^0 is 0 everywhere (as PyTorch's)
  static constexpr unsigned kUses = kX;
  static constexpr double kFlops = 1, kBwdFlops = 3;
  template <typename A> RT_HOST_DEVICE static A fwd(A x, A p) { return math::pow(x, p); }
  template <typename A> RT_HOST_DEVICE static A bwd(A x, A, A dy, A p) {
    return p == A(0) ? A(0) : dy * p * math::pow(x, p - A(1));
  }
};

// ---- binary ops ------------------------------------------------------------------------

struct Add {
  static constexpr unsigned kDaUses = 0, kDbUses = 0;
  static constexpr bool kDaIsDy = true, kDbIsDy = true, kDbIsDa = true;
  static constexpr double kFlops = 1, kBwdFlops = 0;
  template <typename A> RT_HOST_DEVICE static A fwd(A a, A b) { return a + b; }
  template <typename A> RT_HOST_DEVICE static A da(A, A, A, A dy) { return dy; }
  template <typename A> RT_HOST_DEVICE static A db(A, A, A, A dy) { return dy; }
};
struct Sub {
  static constexpr unsigned kDaUses = 0, kDbUses = 0;
  static constexpr bool kDaIsDy = true, kDbIsDy = false, kDbIsDa = false;
  static constexpr double kFlops = 1, kBwdFlops = 1;
  template <typename A> RT_HOST_DEVICE static A fwd(A a, A b) { return a - b; }
  template <typename A> RT_HOST_DEVICE static A da(A, A, A, A dy) { return dy; }
  template <typename A> RT_HOST_DEVICE static A db(A, A, A, A dy) { return -dy; }
};
struct Mul {
  static constexpr unsigned kDaUses = kB, kDbUses = kA;
  static constexpr bool kDaIsDy = false, kDbIsDy = false, kDbIsDa = false;
  static constexpr double kFlops = 1, kBwdFlops = 2;
  template <typename A> RT_HOST_DEVICE static A fwd(A a, A b) { return a * b; }
  template <typename A> RT_HOST_DEVICE static A da(A, A b, A, A dy) { return dy * b; }
  template <typename A> RT_HOST_DEVICE static A db(A a, A, A, A dy) { return dy * a; }
};
struct AddRelu {  // relu(a + b): a residual block's tail
  static constexpr unsigned kDaUses = kY, kDbUses = kY;
  static constexpr bool kDaIsDy = false, kDbIsDy = false, kDbIsDa = true;
  static constexpr double kFlops = 2, kBwdFlops = 1;
  template <typename A> RT_HOST_DEVICE static A fwd(A a, A b) {
    const A s = a + b;
    return s < A(0) ? A(0) : s;
  }
  template <typename A> RT_HOST_DEVICE static A da(A, A, A y, A dy) { return y > A(0) ? dy : A(0); }
  template <typename A> RT_HOST_DEVICE static A db(A, A, A y, A dy) { return y > A(0) ? dy : A(0); }
};
struct Div {  // db as PyTorch: -dy * ((a / b) / b), no b*b to overflow
  static constexpr unsigned kDaUses = kB, kDbUses = kA | kB;
  static constexpr bool kDaIsDy = false, kDbIsDy = false, kDbIsDa = false;
  static constexpr double kFlops = 1, kBwdFlops = 4;
  template <typename A> RT_HOST_DEVICE static A fwd(A a, A b) { return a / b; }
  template <typename A> RT_HOST_DEVICE static A da(A, A b, A, A dy) { return dy / b; }
  template <typename A> RT_HOST_DEVICE static A db(A a, A b, A, A dy) { return -dy * ((a / b) / b); }
};

// ---- the lists: X(enumerator, struct) ----------------------------------------------------

#define RT_EW_UNARY_OPS(X) \
  X(relu, Relu)            \
  X(square, Square)        \
  X(sqrt, Sqrt)            \
  X(exp, Exp)              \
  X(log, Log)              \
  X(sigmoid, Sigmoid)      \
  X(tanh, Tanh)            \
  X(neg, Neg)              \
  X(silu, Silu)            \
  X(pow, Pow)

#define RT_EW_BINARY_OPS(X) \
  X(add, Add)               \
  X(sub, Sub)               \
  X(mul, Mul)               \
  X(add_relu, AddRelu)      \
  X(div, Div)

#define RT_EW_ENUMERATOR(name, Op) name,
enum class Unary : uint8_t { RT_EW_UNARY_OPS(RT_EW_ENUMERATOR) };
enum class Binary : uint8_t { RT_EW_BINARY_OPS(RT_EW_ENUMERATOR) };
#undef RT_EW_ENUMERATOR

// f(Op{}) for the op's struct (host code: the backends' dispatch).
template <typename F>
decltype(auto) visit(Unary op, F&& f) {
  switch (op) {
#define RT_EW_CASE(name, Op) \
  case Unary::name: return f(Op{});
    RT_EW_UNARY_OPS(RT_EW_CASE)
#undef RT_EW_CASE
  }
  RT_FAIL("elementwise: unknown unary op ", int(op));
}

template <typename F>
decltype(auto) visit(Binary op, F&& f) {
  switch (op) {
#define RT_EW_CASE(name, Op) \
  case Binary::name: return f(Op{});
    RT_EW_BINARY_OPS(RT_EW_CASE)
#undef RT_EW_CASE
  }
  RT_FAIL("elementwise: unknown binary op ", int(op));
}

inline const char* name(Unary op) {
  switch (op) {
#define RT_EW_CASE(name, Op) \
  case Unary::name: return #name;
    RT_EW_UNARY_OPS(RT_EW_CASE)
#undef RT_EW_CASE
  }
  return "?";
}

inline const char* name(Binary op) {
  switch (op) {
#define RT_EW_CASE(name, Op) \
  case Binary::name: return #name;
    RT_EW_BINARY_OPS(RT_EW_CASE)
#undef RT_EW_CASE
  }
  return "?";
}

// The table's constants at run time (the engine: what to save, profiler costs).
struct UnaryInfo {
  unsigned uses;
  double flops, bwd_flops;
};
struct BinaryInfo {
  unsigned da_uses, db_uses;
  bool da_is_dy, db_is_dy, db_is_da;
  double flops, bwd_flops;
};
inline UnaryInfo info(Unary op) {
  return visit(op, [](auto o) {
    using Op = decltype(o);
    return UnaryInfo{Op::kUses, Op::kFlops, Op::kBwdFlops};
  });
}
inline BinaryInfo info(Binary op) {
  return visit(op, [](auto o) {
    using Op = decltype(o);
    return BinaryInfo{Op::kDaUses, Op::kDbUses, Op::kDaIsDy, Op::kDbIsDy, Op::kDbIsDa, Op::kFlops, Op::kBwdFlops};
  });
}

// What a binary backward computing da (DA) and/or db (DB) reads, as kA | kB | kY | kDy bits.
template <typename Op, bool DA, bool DB>
inline constexpr unsigned kBinaryGradReads = (DA ? Op::kDaUses : 0u) | (DB ? Op::kDbUses : 0u) | kDy;
// What a unary backward reads.
template <typename Op>
inline constexpr unsigned kUnaryGradReads = Op::kUses | kDy;

// ---- broadcasting ----------------------------------------------------------------------
//
// Note [Broadcast plan]
// A binary op over shapes that broadcast (NumPy/PyTorch rules: shapes aligned at the last
// dim, each pair of sizes equal or one of them 1) walks the output in its own memory order
// (the output is dense: element i at offset i). The plan lists the output's dims in memory
// order (N, H, W, C for channels_last) with each operand's stride along them in elements
// (0 along a dim the operand broadcasts: it has size 1 there or lacks the dim), computed
// from each operand's own memory format: a channels_last operand against an NCHW one (or
// the reverse) is read where it lies, by logical coordinates. Dims of size 1 are dropped
// and neighbours merged when every operand steps through them as one
// (outer stride = inner stride * inner size), so (N, C, H, W) * (N, C, 1, 1) in NCHW
// becomes a 2-D walk (N*C, H*W) with strides (H*W, 1) and (1, 0). At least one dim; at most
// kMaxDims. The backward's sum over broadcast dims uses the same plan: G (the output-shaped
// gradient) is dense along it, and operand k's strides are where each element of G lands in
// the operand's gradient (0: summed over).
inline constexpr int kMaxDims = 8;

struct BroadcastPlan {
  int nd = 1;
  int64_t size[kMaxDims] = {};
  int64_t stride[2][kMaxDims] = {};  // operand 0 (a), operand 1 (b)

  RT_HOST_DEVICE int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < nd; ++d) n *= size[d];
    return n;
  }
  // The plan of two dense operands of n elements in the output's order: no broadcasting.
  static BroadcastPlan dense(int64_t n) {
    BroadcastPlan p;
    p.size[0] = n;
    p.stride[0][0] = p.stride[1][0] = 1;
    return p;
  }
  bool is_dense() const { return nd == 1 && stride[0][0] == 1 && stride[1][0] == 1; }
};

// The operands' offsets of output element i. I: the index type (32-bit when everything
// fits: one division by a constant-free 64-bit divisor costs more than the element).
template <typename I>
RT_HOST_DEVICE void broadcast_offsets(const BroadcastPlan& p, I i, I& oa, I& ob) {
  I a = 0, b = 0;
  for (int d = p.nd - 1; d > 0; --d) {
    const I s = I(p.size[d]);
    const I c = i % s;
    i /= s;
    a += c * I(p.stride[0][d]);
    b += c * I(p.stride[1][d]);
  }
  oa = a + i * I(p.stride[0][0]);
  ob = b + i * I(p.stride[1][0]);
}

// The sum of G (dense along a plan) into operand k's gradient R, split into the dims R keeps
// (each element of R is one point of them) and the dims summed over.
struct SumToPlan {
  int nk = 0, nr = 0;
  int64_t kept_size[kMaxDims] = {}, kept_g[kMaxDims] = {}, kept_r[kMaxDims] = {};
  int64_t red_size[kMaxDims] = {}, red_g[kMaxDims] = {};
  int64_t kept_n = 1, red_n = 1;  // elements of R; terms of each sum
};

inline SumToPlan sum_to_plan(const BroadcastPlan& p, int operand) {
  SumToPlan s;
  int64_t g_stride = 1;
  int64_t gs[kMaxDims];
  for (int d = p.nd - 1; d >= 0; --d) {
    gs[d] = g_stride;
    g_stride *= p.size[d];
  }
  for (int d = 0; d < p.nd; ++d) {
    if (p.stride[operand][d] != 0) {
      s.kept_size[s.nk] = p.size[d];
      s.kept_g[s.nk] = gs[d];
      s.kept_r[s.nk++] = p.stride[operand][d];
      s.kept_n *= p.size[d];
    } else {
      s.red_size[s.nr] = p.size[d];
      s.red_g[s.nr++] = gs[d];
      s.red_n *= p.size[d];
    }
  }
  return s;
}

// Element j of R (kept dims in plan order): its first term's offset in G, its offset in R.
RT_HOST_DEVICE void kept_offsets(const SumToPlan& s, int64_t j, int64_t& g, int64_t& r) {
  int64_t go = 0, ro = 0;
  for (int d = s.nk - 1; d >= 0; --d) {
    const int64_t c = j % s.kept_size[d];
    j /= s.kept_size[d];
    go += c * s.kept_g[d];
    ro += c * s.kept_r[d];
  }
  g = go;
  r = ro;
}

// Term m of a sum: its offset in G from the first term's.
RT_HOST_DEVICE int64_t reduced_offset(const SumToPlan& s, int64_t m) {
  int64_t go = 0;
  for (int d = s.nr - 1; d >= 0; --d) {
    go += (m % s.red_size[d]) * s.red_g[d];
    m /= s.red_size[d];
  }
  return go;
}

}  // namespace rt::ew
