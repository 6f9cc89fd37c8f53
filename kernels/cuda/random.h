// Random fills on CUDA that reproduce rt::Generator's host loops (engine/random.cc).
// splitmix64 adds a constant to its state before each draw, so draw k (0-based) after
// state s is mix(s + (k + 1) * 0x9e3779b97f4a7c15): every element computes its own draws.
// Logical element i (row-major over the shape), with u(k) = (draw k >> 11) * 2^-53:
//   uniform: fma(hi - lo, u(i), lo)
//   normal:  fma(std, sqrt(-2 log(1 - u(2i))) * cos(2 pi u(2i + 1)), mean)
//   int:     lo + draw i % (hi - lo)   (i64, like the host; no rejection sampling)
// The fills consume n, 2n and n draws; the caller then skips its Generator as many.
// Floating values are computed in double and rounded to the dtype (bf16/f16 through f32,
// like the host's f32 buffer converted by Tensor::to). Readable by the host compiler.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

// The output's logical extents and layout. Logical element i counts row-major over
// (N, C, H, W); channels_last stores it at its NHWC offset. A tensor of any other rank
// passes {numel, 1, 1, 1} with channels_last = false.
struct RandomLayout {
  int64_t N = 0, C = 1, H = 1, W = 1;
  bool channels_last = false;
};

// y: N*C*H*W elements of `dtype` (f32, f64, bf16 or f16). Uses draws 0 .. n-1 after `state`.
void random_uniform(uint64_t state, const RandomLayout& at, double lo, double hi, DType dtype, void* y,
                    cudaStream_t s);
// Uses draws 0 .. 2n-1 after `state`: two per element (Generator::normal keeps only the
// cosine value of each Box-Muller pair and caches nothing).
void random_normal(uint64_t state, const RandomLayout& at, double mean, double std, DType dtype, void* y,
                   cudaStream_t s);
// y: n int64 values in [lo, hi) (hi > lo). Uses draws 0 .. n-1 after `state`.
void random_int(uint64_t state, int64_t n, int64_t lo, int64_t hi, int64_t* y, cudaStream_t s);

}  // namespace rt::cuda
