#include "kernels/cpu/batch_norm.h"

#include <cstddef>
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace rt::cpu {
namespace {

// sums[c] += f(c, x_index) over every element of channel c, for both layouts.
// NCHW: one channel per task. NHWC: rows split over threads, per-thread partial sums.
// Note [NCHW sums in lanes]
// An NCHW channel's elements form rows of S; added one after another they make one chain of
// dependent double additions (4 cycles each), which left the NCHW batch norms 3-4x slower
// than the NHWC ones, whose per-channel sums are independent lanes already. So each row is
// summed in kLanes partial sums (element i of a row into lane i % kLanes), combined in lane
// order at the end: the same order whatever the thread count, and vectorised.
constexpr int64_t kLanes = 8;

template <typename F>
void channel_sums(const BatchNormGeom& g, double* sums, F f) {
  if (!g.nhwc) {
    parallel_for(g.C, [&](int64_t c) {
      double lane[kLanes] = {};
      for (int64_t n = 0; n < g.N; ++n) {
        const int64_t base = (n * g.C + c) * g.S;
        int64_t i = 0;
        for (; i + kLanes <= g.S; i += kLanes)
          for (int64_t k = 0; k < kLanes; ++k) lane[k] += f(c, base + i + k);
        for (; i < g.S; ++i) lane[i % kLanes] += f(c, base + i);
      }
      double s = 0;
      for (int64_t k = 0; k < kLanes; ++k) s += lane[k];
      sums[c] = s;
    }, g.N * g.S);
    return;
  }
  const int64_t rows = g.N * g.S;
  const int nt = rows * g.C >= kParallelGrain ? omp_get_max_threads() : 1;
  // (thread, c), threads a cache line apart: a line written by two threads every row
  // (false sharing) costs more than the pass.
  const size_t stride = size_t(g.C) + 8;
  std::vector<double> part(size_t(nt) * stride, 0.0);
#pragma omp parallel num_threads(nt)
  {
    double* p = part.data() + size_t(omp_get_thread_num()) * stride;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < g.C; ++c) p[c] += f(c, r * g.C + c);
  }
  for (int64_t c = 0; c < g.C; ++c) {
    double s = 0;
    for (int t = 0; t < nt; ++t) s += part[size_t(t) * stride + c];
    sums[c] = s;
  }
}

// The backward's sums, sum(dz) and sum(dz * (x - m)), dz = dy or with kMask (y > 0 ? dy : 0),
// in the order of summation of channel_sums. The mask is a select, not a branch (a relu's
// mask is random: a branch mispredicts half the time): dz is written first, to a small
// buffer or to dz_out (GCC 12 if-converts a float select, not one feeding a double sum),
// then the sums read it, over plain __restrict pointers so that they vectorise.

// dz[i] for n elements.
template <typename T, bool kMask>
void masked(const T* __restrict y, const T* __restrict dy, T* __restrict dz, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T g = dy[i];  // loaded unconditionally: a select, not a branch
    dz[i] = kMask ? (y[i] > T(0) ? g : T(0)) : g;
  }
}

// NHWC: one pixel of C channels, added to s0[c], s1[c].
template <typename T>
void grad_sums_pixel(const T* __restrict x, const T* __restrict dz, const double* __restrict m,
                     double* __restrict s0, double* __restrict s1, int64_t C) {
  for (int64_t c = 0; c < C; ++c) {
    const double d = double(dz[c]);
    s0[c] += d;
    s1[c] += d * (double(x[c]) - m[c]);
  }
}

// NCHW: n elements of one channel's row, element i added to lane i % kLanes of s0 and
// s1 (Note [NCHW sums in lanes]).
template <typename T>
void grad_sums_row(const T* __restrict x, const T* __restrict dz, double m, double* __restrict s0,
                   double* __restrict s1, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t k = 0; k < kLanes; ++k) {
      const double d = double(dz[i + k]);
      s0[k] += d;
      s1[k] += d * (double(x[i + k]) - m);
    }
  for (; i < n; ++i) {
    const double d = double(dz[i]);
    s0[i % kLanes] += d;
    s1[i % kLanes] += d * (double(x[i]) - m);
  }
}

// dz_out: null, or where dz goes (with kMask): the residual's gradient of the fused op.
template <typename T, bool kMask>
void grad_sums(const BatchNormGeom& g, const T* x, const T* y, const T* dy, const double* mean, double* sum_dz,
               double* sum_dz_xm, T* dz_out) {
  constexpr int64_t kChunk = 512;  // NCHW: a row masked this many elements at a time
  if (!g.nhwc) {
    static_assert(kChunk % kLanes == 0, "a chunk boundary must keep the lane of every element");
    parallel_for(g.C, [&](int64_t c) {
      double s0[kLanes] = {}, s1[kLanes] = {};
      T buf[kChunk];
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t i = 0; i < g.S; i += kChunk) {
          const int64_t o = (n * g.C + c) * g.S + i, len = std::min(kChunk, g.S - i);
          T* dz = dz_out ? dz_out + o : buf;
          if constexpr (kMask) masked<T, kMask>(y + o, dy + o, dz, len);
          grad_sums_row<T>(x + o, kMask ? dz : dy + o, mean[c], s0, s1, len);
        }
      double a = 0, b = 0;
      for (int64_t k = 0; k < kLanes; ++k) {
        a += s0[k];
        b += s1[k];
      }
      sum_dz[c] = a;
      sum_dz_xm[c] = b;
    }, g.N * g.S);
    return;
  }
  const int64_t rows = g.N * g.S;
  const int nt = rows * g.C >= kParallelGrain ? omp_get_max_threads() : 1;
  // (thread, sum, c), threads a cache line apart, as in channel_sums.
  const size_t stride = size_t(2 * g.C) + 8;
  std::vector<double> part(size_t(nt) * stride, 0.0);
#pragma omp parallel num_threads(nt)
  {
    double* p = part.data() + size_t(omp_get_thread_num()) * stride;
    std::vector<T> buf(kMask && !dz_out ? size_t(g.C) : 0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * g.C;
      T* dz = dz_out ? dz_out + o : buf.data();
      if constexpr (kMask) masked<T, kMask>(y + o, dy + o, dz, g.C);
      grad_sums_pixel<T>(x + o, kMask ? dz : dy + o, mean, p, p + g.C, g.C);
    }
  }
  for (int64_t c = 0; c < g.C; ++c) {
    double s0 = 0, s1 = 0;
    for (int t = 0; t < nt; ++t) {
      s0 += part[size_t(t) * stride + c];
      s1 += part[size_t(t) * stride + g.C + c];
    }
    sum_dz[c] = s0;
    sum_dz_xm[c] = s1;
  }
}

// The one elementwise pass of the forward and of the backward, run over a tensor in runs
// of contiguous elements: an NCHW row (n, c) of S elements, all of channel c, or an NHWC
// pixel of C elements, channel i at i. The per-channel values (m, a, b, k) are indexed by
// [kPixel ? i : 0]: the caller passes channel c's values (row) or all channels' (pixel).
// The loops take plain __restrict pointers so they vectorise (see parallel_range).

// Forward: y = a * (x - m) + b [+ res], then max(y, 0) with kRelu (NaN stays NaN).
template <typename T, bool kPixel, bool kRes, bool kRelu>
void apply_run(const T* __restrict x, const T* __restrict res, const T* __restrict m, const T* __restrict a,
               const T* __restrict b, T* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = kPixel ? i : 0;
    T v = a[c] * (x[i] - m[c]) + b[c];
    if constexpr (kRes) v += res[i];
    if constexpr (kRelu) v = std::max(v, T(0));
    y[i] = v;
  }
}

// Backward: dz = dy, or with kMask dz = (y > 0 ? dy : 0) (Note [Fused batch_norm + relu]);
// dx = k * dz + a * (x - m) + b.
template <typename T, bool kPixel, bool kMask>
void backward_run(const T* __restrict x, const T* __restrict y, const T* __restrict dy, const T* __restrict m,
                  const T* __restrict a, const T* __restrict k, const T* __restrict b, T* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = kPixel ? i : 0;
    const T g = dy[i];  // loaded unconditionally: a select, not a branch, so it vectorises
    const T dz = kMask ? (y[i] > T(0) ? g : T(0)) : g;
    dx[i] = k[c] * dz + a[c] * (x[i] - m[c]) + b[c];
  }
}

// run(offset, n, c, pixel) for every run of the tensor (NCHW rows, NHWC pixels), in parallel.
template <typename F>
void for_each_run(const BatchNormGeom& g, F run) {
  if (!g.nhwc)
    parallel_for(g.N * g.C, [&](int64_t r) { run(r * g.S, g.S, r % g.C, std::false_type{}); }, g.S);
  else
    parallel_for(g.N * g.S, [&](int64_t r) { run(r * g.C, g.C, int64_t(0), std::true_type{}); }, g.C);
}

// f(std::true_type) or f(std::false_type): a run-time flag as a template argument.
template <typename F>
void with_flag(bool on, F f) {
  if (on) f(std::true_type{});
  else f(std::false_type{});
}

template <typename T>
std::vector<T> per_channel(int64_t C) {
  return std::vector<T>(static_cast<size_t>(C));
}

template <typename T>
void apply_impl(const BatchNormGeom& g, const T* x, const T* residual, bool relu, const double* mean,
                const double* invstd, const T* gamma, const T* beta, T* y) {
  // y = (x - mean) * scale + shift per channel; subtracting first keeps precision when
  // |mean| is large against the spread.
  std::vector<T> m = per_channel<T>(g.C), scale = per_channel<T>(g.C), shift = per_channel<T>(g.C);
  for (int64_t c = 0; c < g.C; ++c) {
    m[c] = T(mean[c]);
    scale[c] = T(invstd[c] * (gamma ? double(gamma[c]) : 1.0));
    shift[c] = T(beta ? double(beta[c]) : 0.0);
  }
  with_flag(residual != nullptr, [&](auto has_res) {
    with_flag(relu, [&](auto has_relu) {
      for_each_run(g, [&](int64_t o, int64_t n, int64_t c, auto pixel) {
        apply_run<T, decltype(pixel)::value, decltype(has_res)::value, decltype(has_relu)::value>(
            x + o, residual ? residual + o : nullptr, m.data() + c, scale.data() + c, shift.data() + c, y + o, n);
      });
    });
  });
}

}  // namespace

template <typename T>
void batch_norm_moments(const BatchNormGeom& g, const T* x, double* mean, double* m2) {
  const double M = double(g.N * g.S);
  channel_sums(g, mean, [&](int64_t, int64_t i) { return double(x[i]); });
  for (int64_t c = 0; c < g.C; ++c) mean[c] /= M;
  // Two passes: sum((x - mean)^2) does not cancel like E[x^2] - mean^2 does.
  channel_sums(g, m2, [&](int64_t c, int64_t i) {
    const double d = double(x[i]) - mean[c];
    return d * d;
  });
}

template <typename T>
void batch_norm_stats(const BatchNormGeom& g, const T* x, double* mean, double* var) {
  batch_norm_moments<T>(g, x, mean, var);
  const double M = double(g.N * g.S);
  for (int64_t c = 0; c < g.C; ++c) var[c] /= M;
}

void batch_norm_stats_from_sums(int64_t C, int64_t count, const float* sum, const float* sqsum, double* mean,
                                double* var) {
  const double n = double(count);
  for (int64_t c = 0; c < C; ++c) {
    mean[c] = double(sum[c]) / n;
    const double d = double(sqsum[c]) / n - mean[c] * mean[c];
    var[c] = d < 0.0 ? 0.0 : d;  // rounding, not a variance; a NaN stays NaN
  }
}

namespace {
// One f32 operation, rounded once. The volatile store makes the result a value the compiler
// cannot see through: under -march=x86-64-v3 GCC contracts a multiply and the add after it
// into one FMA (one rounding instead of two), even written through double (it narrows
// float(double(a) * double(b)) to a float multiply first).
float rounded(float v) {
  volatile float r = v;
  return r;
}
float mul_f(float a, float b) { return rounded(a * b); }
float add_f(float a, float b) { return rounded(a + b); }
}  // namespace

void batch_norm_prologue_coefs(int64_t C, const float* mean, const float* invstd, const float* gamma,
                               const float* beta, float* scale, float* bias) {
  for (int64_t c = 0; c < C; ++c) {
    scale[c] = mul_f(gamma ? gamma[c] : 1.0f, invstd[c]);
    bias[c] = add_f(beta ? beta[c] : 0.0f, -mul_f(mean[c], scale[c]));
  }
}

bool prologue_keeps(float x, float scale, float bias) { return add_f(mul_f(x, scale), bias) > 0.0f; }

template <typename T>
void batch_norm_apply(const BatchNormGeom& g, const T* x, const double* mean, const double* invstd, const T* gamma,
                      const T* beta, T* y) {
  apply_impl<T>(g, x, nullptr, false, mean, invstd, gamma, beta, y);
}

template <typename T>
void batch_norm_grad_sums(const BatchNormGeom& g, const T* x, const T* relu_y, const T* dy, const double* mean,
                          const double* invstd, double* sum_dz, double* sum_dz_xmu, T* dgamma, T* dbeta,
                          T* dresidual) {
  // One pass, dy masked by the relu's output when there is one. The residual's gradient is
  // the masked dy itself: this pass writes it (and pass 2 reads it as its dy).
  if (relu_y) grad_sums<T, true>(g, x, relu_y, dy, mean, sum_dz, sum_dz_xmu, dresidual);
  else grad_sums<T, false>(g, x, nullptr, dy, mean, sum_dz, sum_dz_xmu, nullptr);
  if (dgamma)
    for (int64_t c = 0; c < g.C; ++c) dgamma[c] = T(sum_dz_xmu[c] * invstd[c]);
  if (dbeta)
    for (int64_t c = 0; c < g.C; ++c) dbeta[c] = T(sum_dz[c]);
}

template <typename T>
void batch_norm_backward_dx(const BatchNormGeom& g, const T* x, const T* relu_y, const T* dy, const double* mean,
                            const double* invstd, const T* gamma, bool training, double count, const double* sum_dz,
                            const double* sum_dz_xmu, T* dx) {
  // training: dx = gamma*invstd * (dz - mean(dz) - xhat * mean(dz*xhat))
  // eval:     dx = gamma*invstd * dz
  // As dx = k*dz + a*(x - mean) + b per channel.
  std::vector<T> m = per_channel<T>(g.C), k = per_channel<T>(g.C), a = per_channel<T>(g.C), b = per_channel<T>(g.C);
  for (int64_t c = 0; c < g.C; ++c) {
    const double gi = (gamma ? double(gamma[c]) : 1.0) * invstd[c];
    const double sum_dz_xhat = sum_dz_xmu[c] * invstd[c];
    m[c] = T(mean[c]);
    k[c] = T(gi);
    a[c] = T(training ? -gi * invstd[c] * sum_dz_xhat / count : 0.0);
    b[c] = T(training ? -gi * sum_dz[c] / count : 0.0);
  }
  with_flag(relu_y != nullptr, [&](auto mask) {
    for_each_run(g, [&](int64_t o, int64_t n, int64_t c, auto pixel) {
      backward_run<T, decltype(pixel)::value, decltype(mask)::value>(x + o, relu_y ? relu_y + o : nullptr, dy + o,
                                                                     m.data() + c, a.data() + c, k.data() + c,
                                                                     b.data() + c, dx + o, n);
    });
  });
}

template <typename T>
void batch_norm_backward(const BatchNormGeom& g, const T* x, const T* dy, const double* mean, const double* invstd,
                         const T* gamma, bool training, T* dx, T* dgamma, T* dbeta) {
  std::vector<double> s0(static_cast<size_t>(g.C)), s1(static_cast<size_t>(g.C));
  batch_norm_grad_sums<T>(g, x, nullptr, dy, mean, invstd, s0.data(), s1.data(), dgamma, dbeta, nullptr);
  if (dx)
    batch_norm_backward_dx<T>(g, x, nullptr, dy, mean, invstd, gamma, training, double(g.N * g.S), s0.data(),
                              s1.data(), dx);
}

template <typename T>
void batch_norm_apply_relu(const BatchNormGeom& g, const T* x, const T* residual, const double* mean,
                           const double* invstd, const T* gamma, const T* beta, T* y) {
  apply_impl<T>(g, x, residual, true, mean, invstd, gamma, beta, y);
}

template <typename T>
void batch_norm_backward_relu(const BatchNormGeom& g, const T* x, const T* y, const T* dy, const double* mean,
                              const double* invstd, const T* gamma, bool training, T* dx, T* dgamma, T* dbeta,
                              T* dresidual) {
  std::vector<double> s0(static_cast<size_t>(g.C)), s1(static_cast<size_t>(g.C));
  batch_norm_grad_sums<T>(g, x, y, dy, mean, invstd, s0.data(), s1.data(), dgamma, dbeta, dresidual);
  if (!dx) return;
  // dz is in dresidual now when it was asked for: read it once, unmasked.
  batch_norm_backward_dx<T>(g, x, dresidual ? nullptr : y, dresidual ? dresidual : dy, mean, invstd, gamma, training,
                            double(g.N * g.S), s0.data(), s1.data(), dx);
}

#define RT_INSTANTIATE(T)                                                                                         \
  template void batch_norm_stats<T>(const BatchNormGeom&, const T*, double*, double*);                           \
  template void batch_norm_moments<T>(const BatchNormGeom&, const T*, double*, double*);                         \
  template void batch_norm_grad_sums<T>(const BatchNormGeom&, const T*, const T*, const T*, const double*,        \
                                        const double*, double*, double*, T*, T*, T*);                            \
  template void batch_norm_backward_dx<T>(const BatchNormGeom&, const T*, const T*, const T*, const double*,      \
                                          const double*, const T*, bool, double, const double*, const double*,   \
                                          T*);                                                                    \
  template void batch_norm_apply<T>(const BatchNormGeom&, const T*, const double*, const double*, const T*,       \
                                    const T*, T*);                                                                \
  template void batch_norm_backward<T>(const BatchNormGeom&, const T*, const T*, const double*, const double*,    \
                                       const T*, bool, T*, T*, T*);                                         \
  template void batch_norm_apply_relu<T>(const BatchNormGeom&, const T*, const T*, const double*, const double*,  \
                                         const T*, const T*, T*);                                                 \
  template void batch_norm_backward_relu<T>(const BatchNormGeom&, const T*, const T*, const T*, const double*,    \
                                            const double*, const T*, bool, T*, T*, T*, T*);
RT_INSTANTIATE(float)
RT_INSTANTIATE(double)
#undef RT_INSTANTIATE

}  // namespace rt::cpu
