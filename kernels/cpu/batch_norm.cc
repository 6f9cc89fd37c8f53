#include "kernels/cpu/batch_norm.h"

#include <cstddef>
#include <omp.h>

#include <vector>

#include "kernels/cpu/parallel.h"

namespace rt::cpu {
namespace {

// sums[c] += f(c, x_index) over every element of channel c, for both layouts.
// NCHW: one channel per task. NHWC: rows split over threads, per-thread partial sums.
template <typename F>
void channel_sums(const BatchNormGeom& g, double* sums, F f) {
  if (!g.nhwc) {
    parallel_for(g.C, [&](int64_t c) {
      double s = 0;
      for (int64_t n = 0; n < g.N; ++n) {
        const int64_t base = (n * g.C + c) * g.S;
        for (int64_t i = 0; i < g.S; ++i) s += f(c, base + i);
      }
      sums[c] = s;
    }, g.N * g.S);
    return;
  }
  const int64_t rows = g.N * g.S;
  const int nt = rows * g.C >= kParallelGrain ? omp_get_max_threads() : 1;
  std::vector<double> part(size_t(nt) * g.C, 0.0);
#pragma omp parallel num_threads(nt)
  {
    double* p = part.data() + size_t(omp_get_thread_num()) * g.C;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < g.C; ++c) p[c] += f(c, r * g.C + c);
  }
  for (int64_t c = 0; c < g.C; ++c) {
    double s = 0;
    for (int t = 0; t < nt; ++t) s += part[size_t(t) * g.C + c];
    sums[c] = s;
  }
}

// out = a_c * (x - m_c) + b_c  (+ k_c * dy when dy is given), for every element: the one
// elementwise pass of both the forward and the backward. The loops take plain pointers
// so they vectorise (see parallel_range).
template <typename T>
void row_map(const T* x, const T* dy, T m, T a, T k, T b, T* out, int64_t n) {
  if (dy)
    for (int64_t i = 0; i < n; ++i) out[i] = k * dy[i] + a * (x[i] - m) + b;
  else
    for (int64_t i = 0; i < n; ++i) out[i] = a * (x[i] - m) + b;
}

template <typename T>
void pixel_map(const T* x, const T* dy, const T* m, const T* a, const T* k, const T* b, T* out, int64_t C) {
  if (dy)
    for (int64_t c = 0; c < C; ++c) out[c] = k[c] * dy[c] + a[c] * (x[c] - m[c]) + b[c];
  else
    for (int64_t c = 0; c < C; ++c) out[c] = a[c] * (x[c] - m[c]) + b[c];
}

template <typename T>
void channel_map(const BatchNormGeom& g, const T* x, const T* dy, const std::vector<T>& m, const std::vector<T>& a,
                 const std::vector<T>& k, const std::vector<T>& b, T* out) {
  if (!g.nhwc) {
    parallel_for(g.N * g.C, [&](int64_t r) {
      const int64_t c = r % g.C, base = r * g.S;
      row_map(x + base, dy ? dy + base : nullptr, m[c], a[c], k[c], b[c], out + base, g.S);
    }, g.S);
  } else {
    parallel_for(g.N * g.S, [&](int64_t r) {
      pixel_map(x + r * g.C, dy ? dy + r * g.C : nullptr, m.data(), a.data(), k.data(), b.data(), out + r * g.C, g.C);
    }, g.C);
  }
}

}  // namespace

template <typename T>
void batch_norm_stats(const BatchNormGeom& g, const T* x, double* mean, double* var) {
  const double M = double(g.N * g.S);
  channel_sums(g, mean, [&](int64_t, int64_t i) { return double(x[i]); });
  for (int64_t c = 0; c < g.C; ++c) mean[c] /= M;
  // Two passes: sum((x - mean)^2) does not cancel like E[x^2] - mean^2 does.
  channel_sums(g, var, [&](int64_t c, int64_t i) {
    const double d = double(x[i]) - mean[c];
    return d * d;
  });
  for (int64_t c = 0; c < g.C; ++c) var[c] /= M;
}

template <typename T>
void batch_norm_apply(const BatchNormGeom& g, const T* x, const double* mean, const double* invstd, const T* gamma,
                      const T* beta, T* y) {
  // y = (x - mean) * scale + shift per channel; subtracting first keeps precision when
  // |mean| is large against the spread.
  std::vector<T> m(static_cast<size_t>(g.C)), scale(static_cast<size_t>(g.C)), shift(static_cast<size_t>(g.C)),
      none(static_cast<size_t>(g.C), T(0));
  for (int64_t c = 0; c < g.C; ++c) {
    m[c] = T(mean[c]);
    scale[c] = T(invstd[c] * (gamma ? double(gamma[c]) : 1.0));
    shift[c] = T(beta ? double(beta[c]) : 0.0);
  }
  channel_map<T>(g, x, nullptr, m, scale, none, shift, y);
}

template <typename T>
void batch_norm_backward(const BatchNormGeom& g, const T* x, const T* dy, const double* mean, const double* invstd,
                         const T* gamma, bool training, T* dx, T* dgamma, T* dbeta) {
  const double M = double(g.N * g.S);
  std::vector<double> sum_dy(static_cast<size_t>(g.C)), sum_dy_xhat(static_cast<size_t>(g.C));
  channel_sums(g, sum_dy.data(), [&](int64_t, int64_t i) { return double(dy[i]); });
  // sum(dy * xhat) = invstd * sum(dy * (x - mean))
  channel_sums(g, sum_dy_xhat.data(), [&](int64_t c, int64_t i) { return double(dy[i]) * (double(x[i]) - mean[c]); });
  for (int64_t c = 0; c < g.C; ++c) sum_dy_xhat[c] *= invstd[c];
  if (dgamma)
    for (int64_t c = 0; c < g.C; ++c) dgamma[c] = T(sum_dy_xhat[c]);
  if (dbeta)
    for (int64_t c = 0; c < g.C; ++c) dbeta[c] = T(sum_dy[c]);
  if (!dx) return;
  // training: dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy*xhat))
  // eval:     dx = gamma*invstd * dy
  // As dx = k*dy + a*(x - mean) + b per channel.
  std::vector<T> m(static_cast<size_t>(g.C)), k(static_cast<size_t>(g.C)), a(static_cast<size_t>(g.C)), b(static_cast<size_t>(g.C));
  for (int64_t c = 0; c < g.C; ++c) {
    const double gi = (gamma ? double(gamma[c]) : 1.0) * invstd[c];
    m[c] = T(mean[c]);
    k[c] = T(gi);
    a[c] = T(training ? -gi * invstd[c] * sum_dy_xhat[c] / M : 0.0);
    b[c] = T(training ? -gi * sum_dy[c] / M : 0.0);
  }
  channel_map<T>(g, x, dy, m, a, k, b, dx);
}

#define RT_INSTANTIATE(T)                                                                                         \
  template void batch_norm_stats<T>(const BatchNormGeom&, const T*, double*, double*);                           \
  template void batch_norm_apply<T>(const BatchNormGeom&, const T*, const double*, const double*, const T*,       \
                                    const T*, T*);                                                                \
  template void batch_norm_backward<T>(const BatchNormGeom&, const T*, const T*, const double*, const double*,    \
                                       const T*, bool, T*, T*, T*);
RT_INSTANTIATE(float)
RT_INSTANTIATE(double)
#undef RT_INSTANTIATE

}  // namespace rt::cpu
