// Loss-scaling support on CUDA: torch's _amp_foreach_non_finite_check_and_unscale_.
// Readable by the host compiler.
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "kernels/cuda/multi_tensor_table.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

// For every gradient (n[i] elements of dtype t at grads[i], device pointers): g *= inv_scale
// (skipped when inv_scale == 1, as in PyTorch; computed in float, double for f64), and
// *found_inf (a device f32) is set to 1 if any element is inf or NaN. found_inf is only ever
// set, never cleared: zero it before the first call of a step. One launch for the list
// (`table`: the list's device copy, kept for the next call).
// scale_on_device non-null: the kernel takes inv_scale from the loss scale there (a device
// f32) when it runs, float(1 / double(scale)) as the host computes it, and ignores the
// argument (a captured step replays with the scale of its time:
// Note [Loss scaling in a captured step] in optim/grad_scaler.cc).
void unscale_and_check(DType t, const std::vector<void*>& grads, const std::vector<int64_t>& n, float inv_scale,
                       const float* scale_on_device, float* found_inf, MultiTensorTable& table, cudaStream_t s);

// torch's _amp_update_scale_ in device memory (all device pointers, one thread): when
// *found_inf is non-zero, scale *= backoff_factor, the tracker restarts and *skipped_steps
// counts one more skipped step; otherwise after growth_interval clean steps in a row
// scale *= growth_factor (unless that is inf) and the tracker restarts. f32 arithmetic as
// optim/grad_scaler.cc's host rule: the same bits.
void update_loss_scale(float* scale, int32_t* growth_tracker, int64_t* skipped_steps, const float* found_inf,
                       float growth_factor, float backoff_factor, int32_t growth_interval, cudaStream_t s);

}  // namespace rt::cuda
