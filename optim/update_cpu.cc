// See Note [Matching PyTorch's rounding] in update_cpu.h before changing any expression:
// rewriting one algebraically (folding the bias corrections, sqrt(v / bc2) for
// sqrt(v) / sqrt(bc2)) changes f32 results in the last bits.
#include "optim/update_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace rt::optim::cpu {
namespace {

// Below this many elements a parameter is updated by one thread: the update is a few
// flops per element and waking the OpenMP team costs more than it saves.
constexpr int64_t kParallelMin = int64_t(1) << 15;

}  // namespace

template <typename T>
void sgd_update(T* p, const T* g, T* buf, bool first_step, int64_t n, const SgdScalars& s) {
  const bool decay = s.weight_decay != 0.0;  // PyTorch skips the add when 0
  const bool momentum = s.momentum != 0.0;
  const T wd = T(s.weight_decay);
  const T mom = T(s.momentum);
  const T one_minus_damp = T(1.0 - s.dampening);
  const T neg_lr = T(-s.lr);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    T d = decay ? std::fma(p[i], wd, g[i]) : g[i];  // d_p = grad.add(param, alpha=wd)
    if (momentum) {
      // buf = clone(d_p), later buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
      const T b = first_step ? d : std::fma(d, one_minus_damp, buf[i] * mom);
      buf[i] = b;
      d = s.nesterov ? std::fma(b, mom, d) : b;  // d_p.add(buf, alpha=momentum)
    }
    p[i] = std::fma(d, neg_lr, p[i]);  // param.add_(d_p, alpha=-lr)
  }
}

template <typename T>
void adamw_update(T* p, const T* g, T* exp_avg, T* exp_avg_sq, int64_t n, const AdamWScalars& s) {
  // Python-side scalars, in double like torch/optim/adamw.py. PyTorch 1.13 holds the step
  // count in a float32 tensor and raises the betas to it as a Python float.
  const double step = double(s.step);
  const double bias_correction1 = 1.0 - std::pow(s.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(s.beta2, step);
  const double step_size = s.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);

  const T decay = T(1.0 - s.lr * s.weight_decay);
  const T b1 = T(s.beta1), one_minus_b1 = T(1.0 - s.beta1);
  const T b2 = T(s.beta2), one_minus_b2 = T(1.0 - s.beta2);
  const T bc2_sqrt = T(bias_correction2_sqrt);
  const T eps = T(s.eps);
  const T neg_step_size = T(-step_size);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const T pi = p[i] * decay;                                      // param.mul_(1 - lr*wd)
    const T m = std::fma(g[i], one_minus_b1, exp_avg[i] * b1);      // exp_avg.mul_(b1).add_(g, alpha=1-b1)
    const T v = std::fma(one_minus_b2 * g[i], g[i], exp_avg_sq[i] * b2);  // exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
    const T denom = std::sqrt(v) / bc2_sqrt + eps;                  // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    p[i] = pi + (neg_step_size * m) / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  // Fixed chunks, summed in order: the same result for any number of threads.
  constexpr int64_t kChunk = int64_t(1) << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(size_t(std::max<int64_t>(chunks, 1)), 0.0);  // [chunks]
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    double acc = 0.0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) acc += double(x[i]) * double(x[i]);
    part[size_t(c)] = acc;
  }
  double total = 0.0;
  for (double p : part) total += p;
  return total;
}

double lars_trust_ratio(double w_norm, double g_norm, double eta, double weight_decay, double epsilon) {
  return w_norm > 0.0 && g_norm > 0.0 ? eta * w_norm / (g_norm + weight_decay * w_norm + epsilon) : 1.0;
}

template <typename T>
void lars_update(T* p, const T* g, T* v, int64_t n, const LarsScalars& s) {
  const bool decay = s.weight_decay != 0.0;
  const T wd = T(s.weight_decay);
  const T lr = T(s.scaled_lr);
  const T mom = T(s.momentum);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const T d = decay ? std::fma(wd, p[i], g[i]) : g[i];  // g + weight_decay * w
    const T step = lr * d;                               // scaled_lr * (...)
    const T vi = std::fma(mom, v[i], step);              // v = momentum * v + scaled_lr * (...)
    v[i] = vi;
    p[i] = p[i] - (s.nesterov ? std::fma(mom, vi, step) : vi);
  }
}

template <typename T>
void scale(T* x, int64_t n, double coef) {
  const T c = T(coef);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * c;
}

template void sgd_update<float>(float*, const float*, float*, bool, int64_t, const SgdScalars&);
template void sgd_update<double>(double*, const double*, double*, bool, int64_t, const SgdScalars&);
template void adamw_update<float>(float*, const float*, float*, float*, int64_t, const AdamWScalars&);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, const AdamWScalars&);

template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);
template void lars_update<float>(float*, const float*, float*, int64_t, const LarsScalars&);
template void lars_update<double>(double*, const double*, double*, int64_t, const LarsScalars&);
template void scale<float>(float*, int64_t, double);
template void scale<double>(double*, int64_t, double);

}  // namespace rt::optim::cpu
