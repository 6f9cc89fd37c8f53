// Softmax cross-entropy with label smoothing on the CPU (mean over the batch).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rt::cpu {

// Returns the mean loss; writes the softmax probabilities (N x K) for backward.
// Targets must be in [0, K) (checked by the caller).
template <typename T>
double cross_entropy_forward(int64_t N, int64_t K, const T* logits, const int64_t* target, double smoothing,
                             T* probs);
// dlogits = g / N * (probs - ((1 - e) * onehot(target) + e / K)).
template <typename T>
void cross_entropy_backward(int64_t N, int64_t K, const T* probs, const int64_t* target, double smoothing, double g,
                            T* dlogits);

}  // namespace rt::cpu
