// dropout on CUDA: the twin of kernels/cpu/dropout.h (the same mask bit for bit, computed
// per element from the generator's state: Note [Dropout mask]), f32/f64/bf16/f16 (the
// product x * scale in double, rounded once to f32/f64; bf16/f16 through f32). Pointers are
// device pointers; work is queued on `s`. Readable by the host compiler.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/random.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

// y[j] = x[j] * (keep(i) ? scale : 0) over the memory offsets j of `at` (RandomLayout's
// meaning: logical extents N, C, H, W, channels_last memory NHWC), i = j's logical index.
// y may be x. Uses draws 0 .. n-1 after `state`.
void dropout(DType t, uint64_t state, const RandomLayout& at, double p, double scale, const void* x, void* y,
             cudaStream_t s);

}  // namespace rt::cuda
