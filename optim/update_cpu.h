// The optimizers' update rules on raw CPU memory: one fused pass over a parameter and its
// state per step, instead of the chain of elementwise ops PyTorch runs.
//
// Note [Matching PyTorch's rounding]
// Each rule performs the same floating-point operations as torch.optim's single-tensor path
// (1.13, CPU) in the same order and in the parameter's type, so f32 results match PyTorch
// bit for bit, not just closely:
//   * the scalars (lr, 1 - beta1, -step_size, ...) are computed in double, as Python
//     computes them, then rounded to the parameter's type once, as ATen rounds a Python
//     number it multiplies a tensor by;
//   * `x.add_(y, alpha=s)` is x + s*y with ONE rounding: ATen's AVX2/AVX-512 kernels use
//     a fused multiply-add there (vec::fmadd), so these rules call std::fma. This file is
//     compiled with -ffp-contract=off so that the compiler fuses nothing else;
//   * `x.addcmul_(a, b, value=s)` is fma(s*a, b, x): ATen writes x + s*a*b, which
//     multiplies the scalar in first, and GCC (ATen builds with its default
//     -ffp-contract=fast) fuses the last multiply with the add, in the vectorised and the
//     scalar loop alike. `x.addcdiv_(a, b, value=s)` is x + (s*a)/b, nothing to fuse.
// The f32 golden test (tests/optim) holds these to 0 ULPs: each alternative above was
// tried and moves some elements by one.
#pragma once

#include <cstdint>

namespace rt::optim::cpu {

// One SGD update of a parameter, with torch.optim.SGD's arguments (weight_decay already
// 0 for a parameter exempt from decay).
struct SgdScalars {
  double lr = 0.0;
  double momentum = 0.0;  // 0: no momentum buffer
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// p, g: n elements. buf: the momentum buffer (n elements), nullptr when momentum is 0.
// first_step: buf holds nothing yet and becomes a copy of this step's d_p, as in PyTorch
// (its first momentum step is undamped).
template <typename T>
void sgd_update(T* p, const T* g, T* buf, bool first_step, int64_t n, const SgdScalars& s);

// One AdamW update, with torch.optim.AdamW's arguments (amsgrad off).
struct AdamWScalars {
  double lr = 0.0;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;  // this parameter's step count after this update (1 on its first)
};

// p, g, exp_avg, exp_avg_sq: n elements each; the moments start at zero.
template <typename T>
void adamw_update(T* p, const T* g, T* exp_avg, T* exp_avg_sq, int64_t n, const AdamWScalars& s);

// The sum of squares of x (n elements), accumulated in double in a fixed order (chunks of a
// fixed size, their sums added in order), so the result does not depend on the number of
// threads: LARS's norms and clip_grad_norm's.
template <typename T>
double sum_squares(const T* x, int64_t n);

// LARS's trust ratio from the norms of a parameter and its gradient (optim/optimizer.h);
// kernels/cuda/optim.cu computes the same in double.
double lars_trust_ratio(double w_norm, double g_norm, double eta, double weight_decay, double epsilon);

// One LARS update of a parameter (the rule in optim/optimizer.h): scaled_lr is lr times
// the trust ratio (lr alone for an excluded parameter), weight_decay 0 for an excluded one.
struct LarsScalars {
  double scaled_lr = 0.0;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// p, g, v (the momentum buffer, zeros before the first step): n elements each. Per element,
// in T: d = fma(wd, p, g) (g alone when wd is 0), s = scaled_lr * d, v = fma(momentum, v, s),
// p = p - (nesterov ? fma(momentum, v, s) : v); the CUDA kernel performs the same operations.
template <typename T>
void lars_update(T* p, const T* g, T* v, int64_t n, const LarsScalars& s);

// x *= T(coef) over n elements (clip_grad_norm's scaling).
template <typename T>
void scale(T* x, int64_t n, double coef);

}  // namespace rt::optim::cpu
