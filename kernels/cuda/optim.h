// Fused multi-tensor optimizer updates on CUDA: torch.optim.SGD and AdamW (1.13 rules, the
// same operations in the same order as optim/update_cpu.cc, so f32/f64 results match the
// CPU bit for bit; see Note [Bit-exact updates on the GPU] in optim.cu). Parameters are
// master weights in f32 or f64; the state lives on the device. A list of parameters is
// updated in one launch, whatever its length (Note [Multi-tensor apply] in
// kernels/cuda/multi_tensor_plan.h): `table` keeps the list's device copy from one step to
// the next (one table per list the caller updates). Optionally each parameter's
// bf16 copy (p_bf16, may be null) is written in the same pass. Readable by the host compiler.
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "kernels/cuda/multi_tensor_table.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

struct SgdTensor {
  void* p = nullptr;        // n elements of the parameter's dtype
  const void* g = nullptr;  // its gradient
  void* buf = nullptr;      // momentum buffer, null when momentum == 0
  void* p_bf16 = nullptr;   // optional bf16 copy of the updated parameter
  int64_t n = 0;
  double weight_decay = 0.0;
  bool first_step = false;  // buf becomes a copy of this step's d_p
};
struct SgdHyper {
  double lr = 0.0, momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  // Non-null: the kernel reads the learning rate from here ((1,) f64 in device memory) when
  // it runs, instead of taking `lr` as an argument (Note [The learning rate in device memory]
  // in optim/optimizer.h). The same value gives the same bits either way.
  const double* lr_on_device = nullptr;
  // Non-null: the kernel reads this (1,) f32 flag in device memory when it runs and changes
  // nothing (parameters, buffers, copies) when it is non-zero: fp16's loss scaler in a captured
  // step, where the host cannot know whether the gradients overflowed
  // (Note [Skipping an update on the device] in optim/optimizer.h).
  const float* skip_if_set = nullptr;
};
void sgd_update(DType t, const std::vector<SgdTensor>& list, const SgdHyper& h, MultiTensorTable& table,
                cudaStream_t s);

struct AdamWTensor {
  void* p = nullptr;
  const void* g = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  void* p_bf16 = nullptr;
  int64_t n = 0;
  double weight_decay = 0.0;
  int64_t step = 1;  // this parameter's step count after this update
};
struct AdamWHyper {
  double lr = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // Non-null: the kernel reads its per-tensor scalars (1 - lr x weight decay, the square root
  // of the second bias correction, -lr / the first) from here when it runs, the distinct sets
  // of this list as adamw_scalar_sets gives them (adamw_write_scalars put them there), instead
  // of taking them as arguments: a captured step replays with the next step's counts
  // (Note [AdamW's scalars in device memory] in optim/adamw.cc). The same values give the
  // same bits either way.
  const double* scalars_on_device = nullptr;
  // With scalars_on_device, non-null: the kernel reads this (1,) i64 count c when it runs and
  // takes the sets of candidate c (adamw_scalar_sets' `candidates`: the list's sets for step
  // counts c lower), the steps a captured step skipped that the host still counts
  // (Note [AdamW's skipped steps in a captured step] in optim/adamw.cc).
  const int64_t* candidate_on_device = nullptr;
  const float* skip_if_set = nullptr;  // as SgdHyper's
};
void adamw_update(DType t, const std::vector<AdamWTensor>& list, const AdamWHyper& h, MultiTensorTable& table,
                  cudaStream_t s);

// The distinct per-tensor scalar sets of `list` in order of first appearance, 3 doubles each,
// computed on the host exactly as adamw_update computes them. With `candidates` > 1, that many
// groups of them one after the other: group c holds each distinct set computed for its first
// tensor's step count minus c (at least 1), so every group has the first one's layout.
std::vector<double> adamw_scalar_sets(const std::vector<AdamWTensor>& list, const AdamWHyper& h,
                                      int candidates = 1);
inline constexpr int kAdamWDeviceSets = 64;  // sets adamw_write_scalars takes at most
// Writes `sets` (adamw_scalar_sets' values, at most kAdamWDeviceSets sets) to `dst` (3 x
// kAdamWDeviceSets f64 in device memory): one launch with the values as its arguments, so
// nothing waits on the host.
void adamw_write_scalars(const std::vector<double>& sets, double* dst, cudaStream_t s);
// One-thread kernels on an i64 count in device memory (AdamW's skipped steps in a captured
// step): count_if_set adds 1 when the f32 *flag is non-zero; take_count subtracts `take`
// (what the host read and counted).
void count_if_set(const float* flag, int64_t* count, cudaStream_t s);
void take_count(int64_t* count, int64_t take, cudaStream_t s);

// LARS (the rule in optim/optimizer.h) without a host synchronisation: the kernel of
// sum_squares_partials (kernels/cuda/grad_norm.h) over every parameter and gradient of
// the list, then one fused update launch, each block reading its tensor's trust ratio from
// the partials (the same operations as optim/update_cpu.cc's
// lars_update; the norms are summed in another order, so results match within rounding).
struct LarsTensor {
  void* p = nullptr;        // n elements of the parameter's dtype
  const void* g = nullptr;  // its gradient
  void* v = nullptr;        // momentum buffer (zeros before the first step)
  int64_t n = 0;
  double weight_decay = 0.0;  // 0 for an excluded parameter
  bool adapt = true;          // trust ratio; false: scaled_lr = lr (an excluded parameter)
};
struct LarsHyper {
  double lr = 0.0, momentum = 0.0, eta = 0.001, epsilon = 0.0;
  bool nesterov = false;
  const double* lr_on_device = nullptr;  // as SgdHyper's
  const float* skip_if_set = nullptr;    // as SgdHyper's (the norms are computed either way)
};
// The lists LARS keeps on the device: the norms' (w0, g0, w1, g1, ...) and the update's.
struct LarsTables {
  MultiTensorTable norms, update;
};
// partials: lars_partials(list) elements of t on the device (scratch: the norms' partial
// sums, one per chunk of the norms' list).
int64_t lars_partials(const std::vector<LarsTensor>& list);
void lars_update(DType t, const std::vector<LarsTensor>& list, const LarsHyper& h, LarsTables& tables, void* partials,
                 cudaStream_t s);

}  // namespace rt::cuda
