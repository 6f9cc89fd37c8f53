// dropout's mask on the CPU, drawn from rt::Generator's stream without a mask buffer.
//
// Note [Dropout mask]
// The element at logical index i (row-major over the logical shape, whatever the memory
// format) is kept when u_i >= p, where u_i is the uniform of draw i after the generator's
// state (Generator::uniform: the top 53 bits of splitmix64 draw i, times 2^-53), so P(keep) =
// 1 - p. y = x * (kept ? scale : 0), the product in double rounded once: a dropped element is
// 0 (-0 for a negative x, NaN for a NaN, like PyTorch's x * mask). Every element computes its
// own draw from the state, so the CPU and CUDA kernels (kernels/cuda/dropout.h) give the
// same mask bit for bit, and the backward recomputes the mask from the saved state instead of
// keeping it.
#pragma once

#include <cstdint>

namespace rt::cpu {

// The logical extents: N, C, H, W of a 4-D tensor (channels_last: memory is NHWC), or
// {numel, 1, 1, 1} for any other tensor.
struct DropoutLayout {
  int64_t N = 0, C = 1, H = 1, W = 1;
  bool channels_last = false;
};

// y[j] = x[j] * (keep(i) ? scale : 0) over the memory offsets j, i = j's logical index.
// y may be x.
template <typename T>
void dropout(uint64_t state, const DropoutLayout& at, double p, double scale, const T* x, T* y);

}  // namespace rt::cpu
