#include "kernels/cpu/elementwise.h"

#include <cstddef>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace rt::cpu {

namespace {

// The loops, over plain pointer arguments so that they vectorise (see parallel_range). They
// compute in T itself: the table's compute type for f32 and f64 (Note [Elementwise op table]).
// A stride template argument of 0 or 1 is a constant the compiler vectorises with (a
// broadcast operand's value is loaded once); -1 takes the run-time stride.

// p + i, or null for an argument not passed (no arithmetic on a null pointer).
template <typename P>
P* at(P* p, int64_t i) {
  return p ? p + i : p;
}

template <int S>
inline int64_t step(int64_t runtime) {
  return S >= 0 ? S : runtime;
}

template <typename Op, int SA, int SB, typename T>
void binary_loop(const T* a, const T* b, T* y, int64_t n, int64_t sa, int64_t sb) {
  const int64_t ka = step<SA>(sa), kb = step<SB>(sb);
  for (int64_t i = 0; i < n; ++i) y[i] = Op::fwd(a[i * ka], b[i * kb]);
}

template <typename Op, bool DA, bool DB, int SA, int SB, typename T>
void binary_backward_loop(const T* a, const T* b, const T* y, const T* dy, T* da, T* db, int64_t n, int64_t sa,
                          int64_t sb) {
  constexpr unsigned r = ew::kBinaryGradReads<Op, DA, DB>;
  const int64_t ka = step<SA>(sa), kb = step<SB>(sb);
  for (int64_t i = 0; i < n; ++i) {
    const T av = (r & ew::kA) ? a[i * ka] : T(0);
    const T bv = (r & ew::kB) ? b[i * kb] : T(0);
    const T yv = (r & ew::kY) ? y[i] : T(0);
    const T g = dy[i];
    if constexpr (DA) da[i] = Op::da(av, bv, yv, g);
    if constexpr (DB) db[i] = Op::db(av, bv, yv, g);
  }
}

template <typename Op, typename T>
void unary_loop(const T* x, T* y, int64_t n, T p) {
  for (int64_t i = 0; i < n; ++i) y[i] = Op::fwd(x[i], p);
}

template <typename Op, typename T>
void unary_backward_loop(const T* x, const T* y, const T* dy, T* dx, int64_t n, T p) {
  constexpr unsigned r = ew::kUnaryGradReads<Op>;
  for (int64_t i = 0; i < n; ++i) {
    // dy loaded unconditionally: relu's mask is a select, not a branch, so it vectorises.
    dx[i] = Op::bwd((r & ew::kX) ? x[i] : T(0), (r & ew::kY) ? y[i] : T(0), dy[i], p);
  }
}

template <typename T>
void affine_loop(const T* a, T s, T t, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * s + t;
}

template <typename T>
void axpy_loop(T alpha, const T* b, T* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] += alpha * b[i];
}

// f(SA, SB) with the strides as integral constants where they are 0 or 1 (-1: run time).
template <typename F>
void with_strides(int64_t sa, int64_t sb, F&& f) {
  using std::integral_constant;
  if (sa == 1 && sb == 1) return f(integral_constant<int, 1>{}, integral_constant<int, 1>{});
  if (sa == 1 && sb == 0) return f(integral_constant<int, 1>{}, integral_constant<int, 0>{});
  if (sa == 0 && sb == 1) return f(integral_constant<int, 0>{}, integral_constant<int, 1>{});
  f(integral_constant<int, -1>{}, integral_constant<int, -1>{});
}

// Calls run(i, off_a, off_b, len) for output elements [begin, end) of the plan, one call per
// stretch along its innermost dim: output elements i .. i+len-1, operand k's at off_k +
// j * p.stride[k][nd-1] (Note [Broadcast plan]).
template <typename F>
void for_each_run(const ew::BroadcastPlan& p, int64_t begin, int64_t end, F&& run) {
  const int nd = p.nd;
  int64_t c[ew::kMaxDims];
  for (int64_t d = nd - 1, rem = begin; d >= 0; --d) {
    c[d] = rem % p.size[d];
    rem /= p.size[d];
  }
  int64_t i = begin;
  while (i < end) {
    int64_t oa = 0, ob = 0;
    for (int d = 0; d < nd; ++d) {
      oa += c[d] * p.stride[0][d];
      ob += c[d] * p.stride[1][d];
    }
    const int64_t len = std::min(end - i, p.size[nd - 1] - c[nd - 1]);
    run(i, oa, ob, len);
    i += len;
    c[nd - 1] = 0;
    for (int d = nd - 2; d >= 0; --d) {
      if (++c[d] < p.size[d]) break;
      c[d] = 0;
    }
  }
}

// The sum of g[0 .. n) in double, in 8 interleaved partial sums added at the end: a fixed
// order that vectorises (one running sum would wait on each add's latency).
template <typename T>
double sum_run(const T* g, int64_t n) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) part[k] += double(g[i + k]);
  for (int k = 0; i < n; ++i, ++k) part[k] += double(g[i]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// Note [CPU sum over broadcast dims]
// Two orders, both fixed by the shapes alone.
//  - few outputs (a bias-like (1, C, 1, 1), (C) against (N, C)): one pass over G in memory
//    order, in a fixed number of chunks, each adding into its own double copy of R; the
//    copies are added in chunk order. Reads G once, whatever the layout.
//  - many outputs: each element of R sums its terms in order, elements in parallel.
template <typename T>
void sum_to_by_chunks(const ew::BroadcastPlan& p, int operand, const T* g, T* r, int64_t kept_n, int64_t chunks) {
  const int64_t n = p.numel();
  const int64_t rs = p.stride[operand][p.nd - 1];
  std::vector<double> acc(size_t(chunks * kept_n), 0.0);
  parallel_for(chunks, [&](int64_t c) {
    double* ac = acc.data() + c * kept_n;
    for_each_run(p, n * c / chunks, n * (c + 1) / chunks, [&](int64_t i, int64_t oa, int64_t ob, int64_t len) {
      const T* gi = g + i;
      double* ar = ac + (operand == 0 ? oa : ob);
      if (rs == 0) {
        ar[0] += sum_run(gi, len);
      } else {
        for (int64_t k = 0; k < len; ++k) ar[k * rs] += double(gi[k]);
      }
    });
  }, kParallelGrain);
  parallel_for(kept_n, [&](int64_t j) {
    double t = 0;
    for (int64_t c = 0; c < chunks; ++c) t += acc[size_t(c * kept_n + j)];
    r[j] = T(t);
  }, chunks);
}

template <typename T>
void sum_to_by_output(const ew::SumToPlan& s, const T* g, T* r) {
  const int64_t inner = s.nr > 0 ? s.red_size[s.nr - 1] : 1;
  const int64_t inner_stride = s.nr > 0 ? s.red_g[s.nr - 1] : 0;
  parallel_for(s.kept_n, [&](int64_t j) {
    int64_t go, ro;
    ew::kept_offsets(s, j, go, ro);
    double t = 0;
    for (int64_t m = 0; m < s.red_n; m += inner) {
      const T* gm = g + go + ew::reduced_offset(s, m);
      if (inner_stride == 1) {
        t += sum_run(gm, inner);
      } else {
        for (int64_t k = 0; k < inner; ++k) t += double(gm[k * inner_stride]);
      }
    }
    r[ro] = T(t);
  }, s.red_n);
}

}  // namespace

template <typename T>
void binary(Binary op, int64_t n, const T* a, const T* b, T* y) {
  ew::visit(op, [&](auto o) {
    using Op = decltype(o);
    parallel_range(n, [=](int64_t s, int64_t e) { binary_loop<Op, 1, 1>(a + s, b + s, y + s, e - s, 1, 1); });
  });
}

template <typename T>
void binary_broadcast(Binary op, const ew::BroadcastPlan& p, const T* a, const T* b, T* y) {
  if (p.is_dense()) return binary(op, p.numel(), a, b, y);
  const int64_t sa = p.stride[0][p.nd - 1], sb = p.stride[1][p.nd - 1];
  ew::visit(op, [&](auto o) {
    using Op = decltype(o);
    with_strides(sa, sb, [&](auto SA, auto SB) {
      parallel_range(p.numel(), [&](int64_t s, int64_t e) {
        for_each_run(p, s, e, [&](int64_t i, int64_t oa, int64_t ob, int64_t len) {
          binary_loop<Op, decltype(SA)::value, decltype(SB)::value>(a + oa, b + ob, y + i, len, sa, sb);
        });
      });
    });
  });
}

template <typename T>
void binary_backward(Binary op, const ew::BroadcastPlan& p, const T* a, const T* b, const T* y, const T* dy, T* da,
                     T* db) {
  if (da == nullptr && db == nullptr) return;
  const int64_t sa = p.stride[0][p.nd - 1], sb = p.stride[1][p.nd - 1];
  auto go = [&](auto o, auto DA, auto DB) {
    using Op = decltype(o);
    with_strides(sa, sb, [&](auto SA, auto SB) {
      parallel_range(p.numel(), [&](int64_t s, int64_t e) {
        for_each_run(p, s, e, [&](int64_t i, int64_t oa, int64_t ob, int64_t len) {
          binary_backward_loop<Op, decltype(DA)::value, decltype(DB)::value, decltype(SA)::value,
                               decltype(SB)::value>(at(a, oa), at(b, ob), at(y, i), dy + i, at(da, i), at(db, i), len,
                                                    sa, sb);
        });
      });
    });
  };
  using std::integral_constant;
  ew::visit(op, [&](auto o) {
    if (da && db) go(o, integral_constant<bool, true>{}, integral_constant<bool, true>{});
    else if (da) go(o, integral_constant<bool, true>{}, integral_constant<bool, false>{});
    else go(o, integral_constant<bool, false>{}, integral_constant<bool, true>{});
  });
}

template <typename T>
void sum_to(const ew::BroadcastPlan& p, int operand, const T* g, T* r) {
  const int64_t n = p.numel();
  const ew::SumToPlan s = ew::sum_to_plan(p, operand);
  if (s.kept_n == 1) {
    r[0] = T(sum(n, g));
    return;
  }
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(64, n / kParallelGrain));
  if (chunks * s.kept_n <= std::min<int64_t>(n, 1 << 20)) return sum_to_by_chunks(p, operand, g, r, s.kept_n, chunks);
  sum_to_by_output(s, g, r);
}

template <typename T>
void affine(int64_t n, const T* a, double s, double t, T* y) {
  parallel_range(n, [=](int64_t b, int64_t e) { affine_loop(a + b, T(s), T(t), y + b, e - b); });
}

template <typename T>
void unary(Unary op, int64_t n, const T* x, T* y, double p) {
  ew::visit(op, [&](auto o) {
    using Op = decltype(o);
    parallel_range(n, [=](int64_t b, int64_t e) { unary_loop<Op>(x + b, y + b, e - b, T(p)); });
  });
}

template <typename T>
void unary_backward(Unary op, int64_t n, const T* x, const T* y, const T* dy, T* dx, double p) {
  ew::visit(op, [&](auto o) {
    using Op = decltype(o);
    constexpr unsigned r = ew::kUnaryGradReads<Op>;
    parallel_range(n, [=](int64_t b, int64_t e) {
      unary_backward_loop<Op>((r & ew::kX) ? x + b : nullptr, (r & ew::kY) ? y + b : nullptr, dy + b, dx + b, e - b,
                              T(p));
    });
  });
}

template <typename T>
void relu_backward(int64_t n, const T* y, const T* dy, T* dx) {
  unary_backward<T>(Unary::relu, n, nullptr, y, dy, dx);
}

template <typename T>
void axpy(int64_t n, double alpha, const T* b, T* a) {
  parallel_range(n, [=](int64_t s, int64_t e) { axpy_loop(T(alpha), b + s, a + s, e - s); });
}

template <typename T>
double sum(int64_t n, const T* x) {
  // Fixed chunks summed in a fixed order: the result does not depend on the thread count
  // or on scheduling (an OpenMP reduction clause combines in whatever order threads finish).
  const int64_t chunks = std::min<int64_t>(64, (n + kParallelGrain - 1) / kParallelGrain);
  if (chunks <= 1) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(x[i]);
    return s;
  }
  std::vector<double> part(size_t(chunks), 0.0);
  parallel_for(chunks, [&](int64_t c) {
    const int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
    double s = 0;
    for (int64_t i = b; i < e; ++i) s += double(x[i]);
    part[c] = s;
  }, kParallelGrain);
  double s = 0;
  for (double v : part) s += v;
  return s;
}

#define RT_INSTANTIATE(T)                                                                                      \
  template void binary<T>(Binary, int64_t, const T*, const T*, T*);                                           \
  template void binary_broadcast<T>(Binary, const ew::BroadcastPlan&, const T*, const T*, T*);                \
  template void binary_backward<T>(Binary, const ew::BroadcastPlan&, const T*, const T*, const T*, const T*, \
                                   T*, T*);                                                                   \
  template void sum_to<T>(const ew::BroadcastPlan&, int, const T*, T*);                                       \
  template void affine<T>(int64_t, const T*, double, double, T*);                                             \
  template void unary<T>(Unary, int64_t, const T*, T*, double);                                               \
  template void unary_backward<T>(Unary, int64_t, const T*, const T*, const T*, T*, double);                  \
  template void relu_backward<T>(int64_t, const T*, const T*, T*);                                            \
  template void axpy<T>(int64_t, double, const T*, T*);                                                       \
  template double sum<T>(int64_t, const T*);
RT_INSTANTIATE(float)
RT_INSTANTIATE(double)
#undef RT_INSTANTIATE

}  // namespace rt::cpu
