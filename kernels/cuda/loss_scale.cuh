// Loss-scaling support on CUDA: torch's _amp_foreach_non_finite_check_and_unscale_.
// Readable by the host compiler.
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "kernels/cuda/multi_tensor_table.h"
#include "kernels/cuda/stream.cuh"

namespace rt::cuda {

// For every gradient (n[i] elements of dtype t at grads[i], device pointers): g *= inv_scale
// (skipped when inv_scale == 1, as in PyTorch; computed in float, double for f64), and
// *found_inf (a device f32) is set to 1 if any element is inf or NaN. found_inf is only ever
// set, never cleared: zero it before the first call of a step.
// Each gradient multiplied by inv_scale in place (unless it is 1), and *found_inf = 1 when
// any element is NaN or Inf; one launch for the list (`table`: the list's device copy, kept
// for the next call).
void unscale_and_check(DType t, const std::vector<void*>& grads, const std::vector<int64_t>& n, float inv_scale,
                       float* found_inf, MultiTensorTable& table, cudaStream_t s);

}  // namespace rt::cuda
