// linear on the CPU: y (N x out) = x (N x in) * W^T (in x out) + b, through Eigen's GEMM.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rt::cpu {

template <typename T>
void linear_forward(int64_t N, int64_t in, int64_t out, const T* x, const T* w, const T* b, T* y);
// dx = dy * W; dw = dy^T * x; db = column sums of dy. Each may be null.
template <typename T>
void linear_backward(int64_t N, int64_t in, int64_t out, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db);

}  // namespace rt::cpu
