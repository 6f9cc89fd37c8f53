// Batch augmentation on the CPU (the reference of kernels/cuda/batch_augment.cu): mixup and
// cutmix of each image with the one before it, their mixed one-hot targets, and erased boxes.
// Images are (N, C, H, W) in NCHW or NHWC memory (`nhwc`); an image is C H W consecutive
// elements in both, so image n - 1 is the same offset one image back.
#pragma once

#include <cstdint>

namespace rt::cpu {

// y[n] = lam x[n] + (1 - lam) x[(n + N - 1) % N] inside rows [y1, y2) x columns [x1, x2),
// x[n] elsewhere; lam == 0 copies x[n - 1] there. x, y: (N, C, H, W), not overlapping.
template <typename T>
void mix_with_rolled(const T* x, int64_t N, int64_t C, int64_t H, int64_t W, bool nhwc, T lam, int64_t y1,
                     int64_t y2, int64_t x1, int64_t x2, T* y);

// t (N, K) = lam onehot(labels[n]) + (1 - lam) onehot(labels[n - 1]); labels checked by the caller.
template <typename T>
void mix_targets(const int64_t* labels, int64_t N, int64_t K, T lam, T* t);

// x (N, C, H, W) in place: box[n] = {y1, y2, x1, x2} of image n (4 values each) set to value.
template <typename T>
void erase_boxes(T* x, int64_t N, int64_t C, int64_t H, int64_t W, bool nhwc, const int64_t* boxes, T value);

}  // namespace rt::cpu
