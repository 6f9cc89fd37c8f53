// Elementwise ops and full reductions on the CPU over n contiguous elements.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rt::cpu {

enum class Binary { add, sub, mul, add_relu };
enum class Unary { relu, square, sqrt };

template <typename T>
void binary(Binary op, int64_t n, const T* a, const T* b, T* y);
// y = a * s + t
template <typename T>
void affine(int64_t n, const T* a, double s, double t, T* y);
template <typename T>
void unary(Unary op, int64_t n, const T* x, T* y);
// dx = dy where y > 0, else 0 (the relu mask read from the saved output).
template <typename T>
void relu_backward(int64_t n, const T* y, const T* dy, T* dx);
// a += alpha * b
template <typename T>
void axpy(int64_t n, double alpha, const T* b, T* a);
// Sum in double.
template <typename T>
double sum(int64_t n, const T* x);

}  // namespace rt::cpu
