// Elementwise ops from the one op table (kernels/elementwise_ops.h): unary and binary
// forward and backward, binary ops over broadcast shapes and the sum of a gradient over the
// broadcast dims; affine, axpy, and the broadcast of a device scalar.
//
// Kernels first, then launchers. Dense ops are functors over the compute type A (float, or
// double for f64) run by one of two grid-stride kernels: map_vec moves 16-byte packs (4
// floats, 2 doubles, 8 bf16/f16) when every pointer is 16-byte aligned and n is a multiple
// of the pack width; map_scalar handles everything else. A functor reads only the inputs its
// kReads bits name (the others may be null). In-place use (y == a) is allowed: each element
// is read before it is written by the same thread, so no __restrict__.
//
// Broadcast ops walk the output by a BroadcastPlan (Note [Broadcast plan]): each thread maps
// its output index to the operands' offsets by divisions, in 32-bit when everything fits.
// Not optimal: no 16-byte packs there, and the backward writes an output-sized gradient
// that sum_to then folds (one extra pass over it; a fused reduction would save it).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"

#include <atomic>
#include <climits>
#include <type_traits>

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::from_acc;
using detail::Pack;
using detail::to_acc;

// Up to NI inputs and NO outputs of one dense map.
template <typename T, int NI, int NO>
struct Ptrs {
  const T* in[NI];
  T* out[NO];
};

// ---- kernels ---------------------------------------------------------------------------

template <typename T, typename F>
__global__ void map_scalar(int64_t n, Ptrs<T, F::kIn, F::kOut> p, F f) {
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    A x[F::kIn];
    RT_UNROLL
    for (int k = 0; k < F::kIn; ++k) x[k] = ((F::kReads >> k) & 1u) ? to_acc(p.in[k][i]) : A(0);
    A y[F::kOut];
    f(x, y);
    RT_UNROLL
    for (int k = 0; k < F::kOut; ++k) p.out[k][i] = from_acc<T>(y[k]);
  }
}

template <typename T, typename F>
__global__ void map_vec(int64_t npacks, Ptrs<T, F::kIn, F::kOut> p, F f) {
  using A = acc_t<T>;
  constexpr int W = Pack<T>::kWidth;
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < npacks; q += int64_t(gridDim.x) * blockDim.x) {
    Pack<T> in[F::kIn];
    RT_UNROLL
    for (int k = 0; k < F::kIn; ++k)
      if ((F::kReads >> k) & 1u) in[k] = reinterpret_cast<const Pack<T>*>(p.in[k])[q];
    Pack<T> out[F::kOut];
    RT_UNROLL
    for (int w = 0; w < W; ++w) {
      A x[F::kIn];
      RT_UNROLL
      for (int k = 0; k < F::kIn; ++k) x[k] = ((F::kReads >> k) & 1u) ? to_acc(in[k].v[w]) : A(0);
      A y[F::kOut];
      f(x, y);
      RT_UNROLL
      for (int k = 0; k < F::kOut; ++k) out[k].v[w] = from_acc<T>(y[k]);
    }
    RT_UNROLL
    for (int k = 0; k < F::kOut; ++k) reinterpret_cast<Pack<T>*>(p.out[k])[q] = out[k];
  }
}

template <typename T, typename I, typename Op>
__global__ void binary_broadcast_kernel(I n, ew::BroadcastPlan p, const T* a, const T* b, T* y) {
  for (I i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    I oa, ob;
    ew::broadcast_offsets(p, i, oa, ob);
    y[i] = from_acc<T>(Op::fwd(to_acc(a[oa]), to_acc(b[ob])));
  }
}

template <typename T, typename I, typename Op, bool DA, bool DB>
__global__ void binary_backward_broadcast_kernel(I n, ew::BroadcastPlan p, const T* a, const T* b, const T* y,
                                                 const T* dy, T* da, T* db) {
  using A = acc_t<T>;
  constexpr unsigned r = ew::kBinaryGradReads<Op, DA, DB>;
  for (I i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    I oa, ob;
    ew::broadcast_offsets(p, i, oa, ob);
    const A av = (r & ew::kA) ? to_acc(a[oa]) : A(0);
    const A bv = (r & ew::kB) ? to_acc(b[ob]) : A(0);
    const A yv = (r & ew::kY) ? to_acc(y[i]) : A(0);
    const A g = to_acc(dy[i]);
    if constexpr (DA) da[i] = from_acc<T>(Op::da(av, bv, yv, g));
    if constexpr (DB) db[i] = from_acc<T>(Op::db(av, bv, yv, g));
  }
}

// Few terms per sum: one thread per element of r.
template <typename T>
__global__ void sum_to_thread(ew::SumToPlan sp, const T* g, T* r) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < sp.kept_n; j += stride) {
    int64_t go, ro;
    ew::kept_offsets(sp, j, go, ro);
    double s = 0;
    for (int64_t m = 0; m < sp.red_n; ++m) s += double(to_acc(g[go + ew::reduced_offset(sp, m)]));
    r[ro] = from_acc<T>(acc_t<T>(s));
  }
}

// Many terms: one block per element of r, a fixed-order tree over its threads' partial sums.
// Not optimal where the summed dims are strided in g (channels_last against (1, C, 1, 1):
// the block's reads are C apart); batch norm's channel reductions (channel_reduce.cuh) show
// the layout-aware way.
template <typename T>
__global__ void sum_to_block(ew::SumToPlan sp, const T* g, T* r) {
  RT_SHARED(double, smem, [256]);
  for (int64_t j = blockIdx.x; j < sp.kept_n; j += gridDim.x) {
    int64_t go, ro;
    ew::kept_offsets(sp, j, go, ro);
    double s = 0;
    for (int64_t m = threadIdx.x; m < sp.red_n; m += blockDim.x) s += double(to_acc(g[go + ew::reduced_offset(sp, m)]));
    s = detail::block_sum(s, smem);
    if (threadIdx.x == 0) r[ro] = from_acc<T>(acc_t<T>(s));
  }
}

template <typename T>
__global__ void fill_from_scalar_kernel(int64_t n, const T* scalar, acc_t<T> scale, T* y) {
  const T v = from_acc<T>(to_acc(scalar[0]) * scale);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = v;
}

// ---- functors over the compute type: the table's formulas (inputs a/x, b, y, dy as in
// the ew::kA, kB, kY, kDy bits) -----------------------------------------------------------

template <typename Op, typename A>
struct UnaryFwd {
  static constexpr int kIn = 1, kOut = 1;
  static constexpr unsigned kReads = 1;
  A p;
  __device__ void operator()(const A* x, A* y) const { y[0] = Op::fwd(x[0], p); }
};

template <typename Op, typename A>
struct UnaryBwd {  // inputs x, (unused), y, dy
  static constexpr int kIn = 4, kOut = 1;
  static constexpr unsigned kReads = ew::kUnaryGradReads<Op>;
  A p;
  __device__ void operator()(const A* x, A* y) const { y[0] = Op::bwd(x[0], x[2], x[3], p); }
};

template <typename Op, typename A>
struct BinaryFwd {
  static constexpr int kIn = 2, kOut = 1;
  static constexpr unsigned kReads = 3;
  __device__ void operator()(const A* x, A* y) const { y[0] = Op::fwd(x[0], x[1]); }
};

template <typename Op, bool DA, bool DB, typename A>
struct BinaryBwd {  // inputs a, b, y, dy; outputs da and/or db
  static constexpr int kIn = 4, kOut = int(DA) + int(DB);
  static constexpr unsigned kReads = ew::kBinaryGradReads<Op, DA, DB>;
  __device__ void operator()(const A* x, A* y) const {
    if constexpr (DA) y[0] = Op::da(x[0], x[1], x[2], x[3]);
    if constexpr (DB) y[DA ? 1 : 0] = Op::db(x[0], x[1], x[2], x[3]);
  }
};

template <typename A>
struct AffineOp {
  static constexpr int kIn = 1, kOut = 1;
  static constexpr unsigned kReads = 1;
  A s, t;
  __device__ void operator()(const A* x, A* y) const { y[0] = x[0] * s + t; }
};

template <typename A>
struct MaximumOp {  // inputs a, b; NaN in either gives NaN (a + b), like torch.maximum
  static constexpr int kIn = 2, kOut = 1;
  static constexpr unsigned kReads = 3;
  __device__ void operator()(const A* x, A* y) const {
    const A a = x[0], b = x[1];
    y[0] = (a != a || b != b) ? a + b : (a < b ? b : a);
  }
};

template <typename A>
struct AxpyOp {  // inputs a, b
  static constexpr int kIn = 2, kOut = 1;
  static constexpr unsigned kReads = 3;
  A alpha;
  __device__ void operator()(const A* x, A* y) const { y[0] = x[0] + alpha * x[1]; }
};

// ---- launchers -------------------------------------------------------------------------

constexpr int kThreads = 256;

template <typename T, typename F>
void launch_map(int64_t n, const Ptrs<T, F::kIn, F::kOut>& p, F f, cudaStream_t s) {
  RT_CHECK(n >= 0, "elementwise: negative element count ", n);
  if (n == 0) return;
  constexpr int W = Pack<T>::kWidth;
  bool vec = n % W == 0;
  for (int k = 0; k < F::kIn; ++k) {
    if (!((F::kReads >> k) & 1u)) continue;
    RT_CHECK(p.in[k] != nullptr, "elementwise: null pointer");
    vec = vec && detail::aligned16(p.in[k]);
  }
  for (int k = 0; k < F::kOut; ++k) {
    RT_CHECK(p.out[k] != nullptr, "elementwise: null pointer");
    vec = vec && detail::aligned16(p.out[k]);
  }
  // The kernel lab's FLOPs: one operation per element produced (their exact count per op
  // matters little: a few per 2-8 bytes is far under any roof).
  rt::cuda::flops_hint(double(n) * F::kOut, std::is_same_v<T, double>);
  if (vec) {
    const int64_t np = n / W;
    RT_LAUNCH(detail::grid_for(np, kThreads), kThreads, 0, s, map_vec<T, F>)(np, p, f);
  } else {
    RT_LAUNCH(detail::grid_for(n, kThreads), kThreads, 0, s, map_scalar<T, F>)(n, p, f);
  }
  CUDA_CHECK_LAUNCH();
}

// f(std::integral_constant<bool, DA>, ..DB) for the wanted gradients (at least one).
template <typename F>
void with_wanted(bool da, bool db, F&& f) {
  using std::integral_constant;
  if (da && db) f(integral_constant<bool, true>{}, integral_constant<bool, true>{});
  else if (da) f(integral_constant<bool, true>{}, integral_constant<bool, false>{});
  else f(integral_constant<bool, false>{}, integral_constant<bool, true>{});
}

// The largest size indexed with 32 bits: INT32_MAX, or -1 while a WideIndexForTests lives.
std::atomic<int64_t> g_narrow_index_limit{INT32_MAX};

// Calls launch(I{}) with the narrowest index type that holds every index of n elements.
template <typename F>
void with_index_type(int64_t n, F&& launch) {
  if (n <= g_narrow_index_limit.load(std::memory_order_relaxed)) launch(uint32_t{});
  else launch(int64_t{});
}

}  // namespace

WideIndexForTests::WideIndexForTests() { g_narrow_index_limit.store(-1); }
WideIndexForTests::~WideIndexForTests() { g_narrow_index_limit.store(INT32_MAX); }

void binary(Binary op, DType t, int64_t n, const void* a, const void* b, void* y, cudaStream_t s) {
  detail::dispatch_floating(t, "binary", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const Ptrs<T, 2, 1> p{{static_cast<const T*>(a), static_cast<const T*>(b)}, {static_cast<T*>(y)}};
    ew::visit(op, [&](auto o) { launch_map<T>(n, p, BinaryFwd<decltype(o), A>{}, s); });
  });
}

void binary_broadcast(Binary op, DType t, const ew::BroadcastPlan& p, const void* a, const void* b, void* y,
                      cudaStream_t s) {
  if (p.is_dense()) return binary(op, t, p.numel(), a, b, y, s);
  const int64_t n = p.numel();
  detail::dispatch_floating(t, "binary_broadcast", [&](auto z) {
    using T = decltype(z);
    if (n == 0) return;
    RT_CHECK(a != nullptr && b != nullptr && y != nullptr, "binary_broadcast: null pointer");
    ew::visit(op, [&](auto o) {
      with_index_type(n, [&](auto i) {
        using I = decltype(i);
        using Op = decltype(o);  // a type, not the lambda's variable: RT_LAUNCH's lambdas capture nothing
        RT_LAUNCH(detail::grid_for(n, kThreads), kThreads, 0, s, binary_broadcast_kernel<T, I, Op>)(
            I(n), p, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y));
        CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void binary_backward(Binary op, DType t, const ew::BroadcastPlan& p, const void* a, const void* b, const void* y,
                     const void* dy, void* da, void* db, cudaStream_t s) {
  if (da == nullptr && db == nullptr) return;
  const int64_t n = p.numel();
  detail::dispatch_floating(t, "binary_backward", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    auto pa = static_cast<const T*>(a), pb = static_cast<const T*>(b), py = static_cast<const T*>(y);
    auto pdy = static_cast<const T*>(dy);
    auto pda = static_cast<T*>(da), pdb = static_cast<T*>(db);
    ew::visit(op, [&](auto o) {
      using Op = decltype(o);
      with_wanted(da != nullptr, db != nullptr, [&](auto DA, auto DB) {
        constexpr bool kDA = decltype(DA)::value, kDB = decltype(DB)::value;
        using F = BinaryBwd<Op, kDA, kDB, A>;
        if (p.is_dense()) {
          Ptrs<T, 4, F::kOut> ptrs{{pa, pb, py, pdy}, {}};
          if constexpr (kDA) ptrs.out[0] = pda;
          if constexpr (kDB) ptrs.out[kDA ? 1 : 0] = pdb;
          return launch_map<T>(n, ptrs, F{}, s);
        }
        if (n == 0) return;
        constexpr unsigned r = F::kReads;
        RT_CHECK(pdy != nullptr && (!(r & ew::kA) || pa) && (!(r & ew::kB) || pb) && (!(r & ew::kY) || py),
                 "binary_backward: null pointer");
        with_index_type(n, [&](auto i) {
          using I = decltype(i);
          RT_LAUNCH(detail::grid_for(n, kThreads), kThreads, 0, s, binary_backward_broadcast_kernel<T, I, Op, kDA, kDB>)(I(n), p, pa, pb, py, pdy, pda, pdb);
          CUDA_CHECK_LAUNCH();
        });
      });
    });
  });
}

void sum_to(DType t, const ew::BroadcastPlan& p, int operand, const void* g, void* r, cudaStream_t s) {
  RT_CHECK(operand == 0 || operand == 1, "sum_to: operand ", operand, " is not 0 or 1");
  const ew::SumToPlan sp = ew::sum_to_plan(p, operand);
  detail::dispatch_floating(t, "sum_to", [&](auto z) {
    using T = decltype(z);
    if (sp.kept_n == 0) return;
    RT_CHECK(r != nullptr && (g != nullptr || sp.red_n == 0), "sum_to: null pointer");
    auto pg = static_cast<const T*>(g);
    auto pr = static_cast<T*>(r);
    if (sp.red_n > 32) {
      const int blocks = int(std::min<int64_t>(sp.kept_n, 65535));
      RT_LAUNCH(blocks, kThreads, 0, s, sum_to_block<T>)(sp, pg, pr);
    } else {
      RT_LAUNCH(detail::grid_for(sp.kept_n, kThreads), kThreads, 0, s, sum_to_thread<T>)(sp, pg, pr);
    }
    CUDA_CHECK_LAUNCH();
  });
}

void affine(DType t, int64_t n, const void* a, double s, double sh, void* y, cudaStream_t st) {
  detail::dispatch_floating(t, "affine", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    launch_map<T>(n, Ptrs<T, 1, 1>{{static_cast<const T*>(a)}, {static_cast<T*>(y)}}, AffineOp<A>{A(s), A(sh)}, st);
  });
}

void maximum(DType t, int64_t n, const void* a, const void* b, void* y, cudaStream_t s) {
  detail::dispatch_floating(t, "maximum", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const Ptrs<T, 2, 1> p{{static_cast<const T*>(a), static_cast<const T*>(b)}, {static_cast<T*>(y)}};
    launch_map<T>(n, p, MaximumOp<A>{}, s);
  });
}

void unary(Unary op, DType t, int64_t n, const void* x, void* y, double p, cudaStream_t s) {
  detail::dispatch_floating(t, "unary", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const Ptrs<T, 1, 1> ptrs{{static_cast<const T*>(x)}, {static_cast<T*>(y)}};
    ew::visit(op, [&](auto o) { launch_map<T>(n, ptrs, UnaryFwd<decltype(o), A>{A(p)}, s); });
  });
}

void unary_backward(Unary op, DType t, int64_t n, const void* x, const void* y, const void* dy, void* dx, double p,
                    cudaStream_t s) {
  detail::dispatch_floating(t, "unary_backward", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const Ptrs<T, 4, 1> ptrs{{static_cast<const T*>(x), nullptr, static_cast<const T*>(y), static_cast<const T*>(dy)},
                             {static_cast<T*>(dx)}};
    ew::visit(op, [&](auto o) { launch_map<T>(n, ptrs, UnaryBwd<decltype(o), A>{A(p)}, s); });
  });
}

void relu_backward(DType t, int64_t n, const void* y, const void* dy, void* dx, cudaStream_t s) {
  unary_backward(Unary::relu, t, n, nullptr, y, dy, dx, 0.0, s);
}

void sqrt_backward(DType t, int64_t n, const void* y, const void* dy, void* dx, cudaStream_t s) {
  unary_backward(Unary::sqrt, t, n, nullptr, y, dy, dx, 0.0, s);
}

void axpy(DType t, int64_t n, double alpha, const void* b, void* a, cudaStream_t s) {
  detail::dispatch_floating(t, "axpy", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    launch_map<T>(n, Ptrs<T, 2, 1>{{static_cast<const T*>(a), static_cast<const T*>(b)}, {static_cast<T*>(a)}},
                  AxpyOp<A>{A(alpha)}, s);
  });
}

void fill_from_scalar(DType t, int64_t n, const void* scalar, double scale, void* y, cudaStream_t s) {
  RT_CHECK(n >= 0, "fill_from_scalar: negative element count ", n);
  RT_CHECK(scalar != nullptr && (n == 0 || y != nullptr), "fill_from_scalar: null pointer");
  if (n == 0) return;
  detail::dispatch_floating(t, "fill_from_scalar", [&](auto z) {
    using T = decltype(z);
    RT_LAUNCH(detail::grid_for(n, kThreads), kThreads, 0, s, fill_from_scalar_kernel<T>)(
        n, static_cast<const T*>(scalar), acc_t<T>(scale), static_cast<T*>(y));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace rt::cuda
