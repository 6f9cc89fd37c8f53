// softmax and log_softmax on the CPU over the middle dim of a row-major (outer, n, inner)
// array (Note [Memory order of logical dims] in engine/ops/strided.h). Computed in double
// and rounded once, max-subtracted:
//   softmax:     y = exp(x - m) / s                 m = max_r x, s = sum_r exp(x - m)
//   log_softmax: y = (x - m) - log(s)
#pragma once

#include <cstdint>

namespace rt::cpu {

template <typename T>
void softmax_forward(bool log, int64_t outer, int64_t n, int64_t inner, const T* x, T* y);
// From the output y and its gradient dy, in one pass over each row:
//   softmax:     dx = y * (dy - sum_r dy * y)
//   log_softmax: dx = dy - exp(y) * sum_r dy
template <typename T>
void softmax_backward(bool log, int64_t outer, int64_t n, int64_t inner, const T* y, const T* dy, T* dx);

}  // namespace rt::cpu
