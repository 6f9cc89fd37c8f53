// Sums of squares over a list of tensors (Note [Deterministic norms] in grad_norm.cu),
// clip_grad_norm's coefficient from them, and a list scaled by a device scalar: the CUDA
// half of optim/clip_grad.cc and of LARS's trust ratios, without a host synchronisation.
// Readable by the host compiler.
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "kernels/cuda/multi_tensor_table.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

// The partials a list of tensors of these sizes needs: one per chunk (kMtaChunk elements).
int64_t multi_tensor_chunks(const std::vector<int64_t>& n);

// partials[c] = the sum of squares of chunk c of the list x (multi_tensor_chunks(n)
// elements of t on the device); `table` then holds the list (for clip_grad_coef and
// scale_by_device_coef).
void sum_squares_partials(DType t, const std::vector<const void*>& x, const std::vector<int64_t>& n,
                          MultiTensorTable& table, void* partials, cudaStream_t s);

// *total_out = the norm of the per-tensor norms of the list `table` holds (as
// torch.nn.utils.clip_grad_norm_), *coef_out = min(max_norm / (total + 1e-6), 1).
void clip_grad_coef(DType t, MultiTensorTable& table, const void* partials, double max_norm, void* total_out,
                    double* coef_out, cudaStream_t s);

// Every tensor of the list `table` holds multiplied in place by *coef.
void scale_by_device_coef(DType t, MultiTensorTable& table, const double* coef, cudaStream_t s);

}  // namespace rt::cuda
