// unscale_and_check: one multi-tensor apply over the gradients (Note [Multi-tensor apply] in
// kernels/cuda/multi_tensor_plan.h). The flag is set to 1.0f by any thread that sees a
// non-finite value (every writer stores the same value, so the result does not depend on
// ordering).
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/loss_scale.h"
#include "kernels/cuda/multi_tensor_apply.cuh"

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::from_acc;
using detail::to_acc;

__device__ __forceinline__ bool finite(float v) { return isfinite(v); }
__device__ __forceinline__ bool finite(double v) { return isfinite(v); }

// Operand: ptr[0] the gradient, unscaled in place.
template <typename T>
struct UnscaleOp {
  float inv_scale;
  const float* scale;  // null: inv_scale
  float* found_inf;    // []
  __device__ void operator()(const MtaRow& r, int64_t, int64_t begin, int64_t end) const {
    using A = acc_t<T>;
    const float inv_scale = scale != nullptr ? float(1.0 / double(*scale)) : this->inv_scale;
    T* g = static_cast<T*>(r.ptr[0]);
    bool bad = false;
    RT_MTA_FOR(i, begin, end) {
      const A v = to_acc(g[i]);
      bad |= !finite(v);
      if (inv_scale != 1.0f) g[i] = from_acc<T>(v * A(inv_scale));
    }
    // Several blocks may find one: an atomic store, so the flag is not a data race between
    // blocks (a plain store of the same value works on hardware, but ThreadSanitizer under
    // --config=cuda-emu-tsan rightly calls it one).
    if (bad) atomicExch(found_inf, 1.0f);
  }
};

// One thread: the scaler's update (update_loss_scale).
__global__ void update_scale_kernel(float* scale, int32_t* tracker, int64_t* skipped, const float* found_inf,
                                    float growth, float backoff, int32_t interval) {
  if (*found_inf != 0.0f) {
    *scale = __fmul_rn(*scale, backoff);
    *tracker = 0;
    *skipped += 1;
  } else if (++*tracker == interval) {
    const float grown = __fmul_rn(*scale, growth);
    if (isfinite(grown)) *scale = grown;
    *tracker = 0;
  }
}

}  // namespace

void update_loss_scale(float* scale, int32_t* growth_tracker, int64_t* skipped_steps, const float* found_inf,
                       float growth_factor, float backoff_factor, int32_t growth_interval, cudaStream_t s) {
  RT_CHECK(scale && growth_tracker && skipped_steps && found_inf, "update_loss_scale: null pointer");
  RT_CHECK(growth_interval > 0, "update_loss_scale: growth_interval must be > 0, got ", growth_interval);
  RT_LAUNCH(1, 1, 0, s, update_scale_kernel)(scale, growth_tracker, skipped_steps, found_inf, growth_factor,
                                            backoff_factor, growth_interval);
  CUDA_CHECK_LAUNCH();
}

void unscale_and_check(DType t, const std::vector<void*>& grads, const std::vector<int64_t>& n, float inv_scale,
                       const float* scale_on_device, float* found_inf, MultiTensorTable& table, cudaStream_t s) {
  RT_CHECK(grads.size() == n.size(), "unscale_and_check: ", grads.size(), " gradients but ", n.size(), " sizes");
  RT_CHECK(found_inf != nullptr, "unscale_and_check: null found_inf");
  std::vector<MtaRow> rows(grads.size(), MtaRow{});
  for (size_t i = 0; i < n.size(); ++i) {
    RT_CHECK(n[i] >= 0, "unscale_and_check: negative element count ", n[i]);
    RT_CHECK(n[i] == 0 || grads[i] != nullptr, "unscale_and_check: null gradient");
    rows[i].ptr[0] = grads[i];
    rows[i].n = n[i];
  }
  detail::dispatch_floating(t, "unscale_and_check", [&](auto z) {
    using T = decltype(z);
    table.set(std::move(rows), std::vector<int>(n.size(), 0), s);
    multi_tensor_apply(table, UnscaleOp<T>{inv_scale, scale_on_device, found_inf}, NoGroups{}, 1.0, false, s);
  });
}

}  // namespace rt::cuda
