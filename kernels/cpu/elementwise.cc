#include "kernels/cpu/elementwise.h"

#include <cstddef>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace rt::cpu {

template <typename T>
void binary(Binary op, int64_t n, const T* a, const T* b, T* y) {
  switch (op) {
    case Binary::add: parallel_for(n, [&](int64_t i) { y[i] = a[i] + b[i]; }); break;
    case Binary::sub: parallel_for(n, [&](int64_t i) { y[i] = a[i] - b[i]; }); break;
    case Binary::mul: parallel_for(n, [&](int64_t i) { y[i] = a[i] * b[i]; }); break;
    case Binary::add_relu:
      parallel_for(n, [&](int64_t i) {
        const T v = a[i] + b[i];
        y[i] = v > T(0) ? v : T(0);
      });
      break;
  }
}

template <typename T>
void affine(int64_t n, const T* a, double s, double t, T* y) {
  const T st = T(s), tt = T(t);
  parallel_for(n, [&](int64_t i) { y[i] = a[i] * st + tt; });
}

template <typename T>
void unary(Unary op, int64_t n, const T* x, T* y) {
  switch (op) {
    case Unary::relu: parallel_for(n, [&](int64_t i) { y[i] = x[i] > T(0) ? x[i] : T(0); }); break;
    case Unary::square: parallel_for(n, [&](int64_t i) { y[i] = x[i] * x[i]; }); break;
    case Unary::sqrt: parallel_for(n, [&](int64_t i) { y[i] = std::sqrt(x[i]); }); break;
  }
}

template <typename T>
void relu_backward(int64_t n, const T* y, const T* dy, T* dx) {
  parallel_for(n, [&](int64_t i) { dx[i] = y[i] > T(0) ? dy[i] : T(0); });
}

template <typename T>
void axpy(int64_t n, double alpha, const T* b, T* a) {
  const T al = T(alpha);
  if (alpha == 1.0) parallel_for(n, [&](int64_t i) { a[i] += b[i]; });
  else parallel_for(n, [&](int64_t i) { a[i] += al * b[i]; });
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

#define RT_INSTANTIATE(T)                                                   \
  template void binary<T>(Binary, int64_t, const T*, const T*, T*);        \
  template void affine<T>(int64_t, const T*, double, double, T*);          \
  template void unary<T>(Unary, int64_t, const T*, T*);                    \
  template void relu_backward<T>(int64_t, const T*, const T*, T*);         \
  template void axpy<T>(int64_t, double, const T*, T*);                    \
  template double sum<T>(int64_t, const T*);
RT_INSTANTIATE(float)
RT_INSTANTIATE(double)
#undef RT_INSTANTIATE

}  // namespace rt::cpu
