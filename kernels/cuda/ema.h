// torchvision's model EMA on CUDA: avg = decay * avg + (1 - decay) * p over a list of
// tensors, one launch per dtype for the whole list, no host sync. The same
// operations in the same order as optim/ema.cc's CPU loop, so results match it bit for bit
// (Note [EMA rounding] in optim/ema.h). Readable by the host compiler.
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "kernels/cuda/multi_tensor_table.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

struct EmaTensor {
  void* avg = nullptr;      // n elements: the EMA's tensor, updated in place
  const void* p = nullptr;  // n elements: the live model's tensor (same dtype and layout)
  int64_t n = 0;
};

// t: f32 or f64 (computed in t), or i64 (computed in f32 and truncated toward zero, as
// PyTorch does for num_batches_tracked). copy: avg = p (AveragedModel's first update),
// decay unused. decay must be finite; the launcher computes 1 - decay in double.
// `table`: the list's device copy, kept for the next call.
void ema_update(DType t, const std::vector<EmaTensor>& list, double decay, bool copy, MultiTensorTable& table,
                cudaStream_t s);

}  // namespace rt::cuda
