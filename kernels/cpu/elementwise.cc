#include "kernels/cpu/elementwise.h"

#include <cstddef>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace rt::cpu {

namespace {

// The loops, over plain pointer arguments so that they vectorise (see parallel_range).
template <typename T>
void binary_loop(Binary op, const T* a, const T* b, T* y, int64_t n) {
  switch (op) {
    case Binary::add:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
      break;
    case Binary::sub:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] - b[i];
      break;
    case Binary::mul:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
      break;
    case Binary::add_relu:
      for (int64_t i = 0; i < n; ++i) {
        y[i] = std::max(a[i] + b[i], T(0));
      }
      break;
  }
}

template <typename T>
void unary_loop(Unary op, const T* x, T* y, int64_t n) {
  switch (op) {
    case Unary::relu:
      for (int64_t i = 0; i < n; ++i) y[i] = std::max(x[i], T(0));  // NaN stays NaN, like PyTorch
      break;
    case Unary::square:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i];
      break;
    case Unary::sqrt:
      for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
      break;
  }
}

template <typename T>
void affine_loop(const T* a, T s, T t, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * s + t;
}

template <typename T>
void relu_backward_loop(const T* y, const T* dy, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T g = dy[i];  // loaded unconditionally: a select, not a branch, so it vectorises
    dx[i] = y[i] > T(0) ? g : T(0);
  }
}

template <typename T>
void axpy_loop(T alpha, const T* b, T* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] += alpha * b[i];
}

}  // namespace

template <typename T>
void binary(Binary op, int64_t n, const T* a, const T* b, T* y) {
  parallel_range(n, [=](int64_t s, int64_t e) { binary_loop(op, a + s, b + s, y + s, e - s); });
}

template <typename T>
void affine(int64_t n, const T* a, double s, double t, T* y) {
  parallel_range(n, [=](int64_t b, int64_t e) { affine_loop(a + b, T(s), T(t), y + b, e - b); });
}

template <typename T>
void unary(Unary op, int64_t n, const T* x, T* y) {
  parallel_range(n, [=](int64_t b, int64_t e) { unary_loop(op, x + b, y + b, e - b); });
}

template <typename T>
void relu_backward(int64_t n, const T* y, const T* dy, T* dx) {
  parallel_range(n, [=](int64_t b, int64_t e) { relu_backward_loop(y + b, dy + b, dx + b, e - b); });
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
