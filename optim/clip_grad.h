// Gradient-norm clipping: torch.nn.utils.clip_grad_norm_(params, max_norm) with norm_type 2.
#pragma once

#include "engine/nn/module.h"
#include "engine/tensor.h"
#include "kernels/cuda/multi_tensor_table.h"

namespace rt::optim {

// total = sqrt(sum_i ||g_i||^2), computed as the norm of the per-tensor norms as torch
// does; coef = min(max_norm / (total + 1e-6), 1); every gradient is multiplied by coef in
// place (always, as torch does with the clamped coef: below the threshold coef is exactly
// 1 and the gradients are unchanged). Parameters without a gradient are skipped.
//
// Returns the total norm as a 0-d tensor of the gradients' dtype on their device. On CUDA
// nothing is read by the host (the norms are summed and the coef computed by kernels,
// kernels/cuda/grad_norm.cu): read the result only when logging it. The norms are
// accumulated in double on the CPU, in the dtype on CUDA, in a fixed order on both.
//
// The gradients must all be f32 or all f64, on one device; otherwise rt::Error says which
// parameter differs. max_norm must be finite and >= 0. With no gradient at all the result
// is 0 (the first parameter's dtype and device) and nothing changes.
//
// `table`: the gradients' list on the device, kept from one step to the next by a caller
// that clips every step (train::MixedPrecision); null: one for this call only.
Tensor clip_grad_norm(const nn::NamedTensors& params, double max_norm, cuda::MultiTensorTable* table = nullptr);

}  // namespace rt::optim
