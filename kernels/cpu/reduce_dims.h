// Reductions over one block of dims on the CPU. x is a row-major (outer, n, inner) array
// (the reduced dims merged into n, Note [Memory order of logical dims] in
// engine/ops/strided.h); results are row-major (outer, inner). Every output element is
// summed (or compared) in the order r = 0 .. n-1 whatever the thread count: deterministic.
#pragma once

#include <cstdint>

namespace rt::cpu {

// y = scale * sum over r of x[o, r, i], accumulated in double and rounded once.
template <typename T>
void sum_dim(int64_t outer, int64_t n, int64_t inner, const T* x, double scale, T* y);
// y = max over r of x[o, r, i]; idx = the first r holding it. NaN counts as the largest value
// (the first NaN wins), like PyTorch's max(dim). n > 0.
template <typename T>
void max_dim(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx);
// dx (outer, n, inner) = 0 except dx[o, idx[o, i], i] = dy[o, i].
template <typename T>
void max_dim_backward(int64_t outer, int64_t n, int64_t inner, const T* dy, const int64_t* idx, T* dx);

}  // namespace rt::cpu
