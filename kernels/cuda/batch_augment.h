// Batch augmentation on CUDA, the twins of kernels/cpu/batch_augment.h: mixup and cutmix of
// each image with the one before it, the mixed one-hot targets, erased boxes. f32, f64, bf16
// and f16 (bf16/f16 computed in float and rounded once). Images are (N, C, H, W), NCHW or
// NHWC memory (`nhwc`). Pointers are device pointers unless said; work is queued on `s`,
// nothing waits for the GPU. Readable by the host compiler.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

// y[n] = lam x[n] + (1 - lam) x[(n + N - 1) % N] inside rows [y1, y2) x columns [x1, x2),
// x[n] elsewhere; lam == 0 copies x[n - 1] there. x, y: (N, C, H, W), not overlapping.
void mix_with_rolled(DType t, const void* x, int64_t N, int64_t C, int64_t H, int64_t W, bool nhwc, double lam,
                     int64_t y1, int64_t y2, int64_t x1, int64_t x2, void* y, cudaStream_t s);

// t (N, K) = lam onehot(labels[n]) + (1 - lam) onehot(labels[n - 1]); a row whose label (or
// its predecessor's) is outside [0, K) is NaN (Note [CUDA target validation]).
void mix_targets(DType t, const int64_t* labels, int64_t N, int64_t K, double lam, void* out, cudaStream_t s);

// x (N, C, H, W) in place: image n's box {y1, y2, x1, x2} = boxes[4 n .. 4 n + 3] (host memory,
// read before the call returns) set to value in every channel. The non-empty boxes travel as
// kernel arguments, kMaxBoxesPerLaunch per launch: no copy, no allocation, no synchronisation.
inline constexpr int kMaxBoxesPerLaunch = 180;
void erase_boxes(DType t, void* x, int64_t N, int64_t C, int64_t H, int64_t W, bool nhwc, const int64_t* boxes,
                 double value, cudaStream_t s);

}  // namespace rt::cuda
