// Softmax cross-entropy with label smoothing on CUDA: the twin of kernels/cpu/cross_entropy.h,
// with the loss and its gradient kept on the device (never read on the host). f32, f64, bf16,
// f16 storage; the compute type is f64 for f64 and f32 otherwise. Readable by the host compiler.
//
// Note [CUDA target validation]
// The targets live on the device, so the op cannot check them on the host without a
// synchronising read. Instead the forward kernel checks each target: a row whose target is
// outside [0, K) gets a NaN loss (so the mean loss is NaN and the error cannot pass silently)
// and NaN gradients, and `bad_target` (when non-null) is set to 1. The op reads that flag
// back (synchronously) only when RINGTAPE_SYNC_CHECKS is set; see
// engine/ops/cross_entropy.cc.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

// The dtype of the per-row loss scratch.
inline DType cross_entropy_acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// probs (N, K) = softmax(logits) in dtype t; row_loss (N) in cross_entropy_acc_dtype(t):
// (1 - e) * (-log p_i[y_i]) + e * mean_k(-log p_ik); loss (0-D, dtype t) = mean of row_loss,
// summed in a fixed order (deterministic). bad_target may be null.
void cross_entropy_forward(DType t, int64_t N, int64_t K, const void* logits, const int64_t* target, double smoothing,
                           void* probs, void* row_loss, void* loss, int32_t* bad_target, cudaStream_t s);
// dlogits = g[0] / N * (probs - ((1 - e) * onehot(target) + e / K)); g is the loss's gradient,
// a device scalar of dtype t.
void cross_entropy_backward(DType t, int64_t N, int64_t K, const void* probs, const int64_t* target, double smoothing,
                            const void* g, void* dlogits, cudaStream_t s);

}  // namespace rt::cuda
