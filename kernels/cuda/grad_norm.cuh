// Multi-tensor norms on CUDA without a host synchronisation: LARS's per-parameter norms
// (optim.cu's lars_update) and clip_grad_norm's total norm and scaling. Readable by the host
// compiler.
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "kernels/cuda/stream.cuh"

namespace rt::cuda {

// Blocks per tensor of the sum-of-squares kernel: each tensor's sum of squares arrives as
// this many partial sums, added in index order by whoever reads them.
inline constexpr int kNormBlocks = 32;

// For every tensor i (n[i] elements of dtype t, f32 or f64, at x[i]; device pointers):
// partials[i * kNormBlocks + b] = the sum of the squares of block b's grid-stride slice,
// accumulated in t (float for f32, double for f64). partials: x.size() * kNormBlocks
// elements of t on the device. Deterministic (Note [Deterministic norms] in grad_norm.cu).
void sum_squares_partials(DType t, const std::vector<const void*>& x, const std::vector<int64_t>& n, void* partials,
                          cudaStream_t s);

// torch.nn.utils.clip_grad_norm_'s scalars from the partials of `count` gradients:
//   total = sqrt(sum_i norm_i^2) with norm_i = sqrt(sum_b partials[i][b]), in double;
//   *total_out = total rounded to t (a 0-d tensor's element);
//   *coef_out (a device double) = min(max_norm / (total + 1e-6), 1).
// One block; count 0 writes total 0 and coef 1.
void clip_grad_coef(DType t, int64_t count, const void* partials, double max_norm, void* total_out, double* coef_out,
                    cudaStream_t s);

// x[i][j] *= t(*coef) for every tensor i (n[i] elements of dtype t at x[i]); coef is a
// device double, read by the kernel (no host read).
void scale_by_device_coef(DType t, const std::vector<void*>& x, const std::vector<int64_t>& n, const double* coef,
                          cudaStream_t s);

}  // namespace rt::cuda
