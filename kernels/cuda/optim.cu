// Fused SGD, AdamW and LARS over a list of parameters.
//
// Note [Bit-exact updates on the GPU]
// optim/update_cpu.cc rounds exactly where PyTorch does
// (Note [Matching PyTorch's rounding]): explicit std::fma where ATen fuses, nothing else
// fused (-ffp-contract=off). nvcc contracts a*b+c into an FMA by default, so these kernels
// spell every operation with a round-to-nearest intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn,
// __fsqrt_rn and the double twins), which nvcc never contracts, and call fma() exactly where
// the CPU calls std::fma. The per-tensor scalars are computed on the host in double, like
// the CPU rule, and rounded to the parameter's type once. So f32 and f64 results equal the
// CPU's bit for bit.
//
// Launch shape: grid.y indexes the tensors of one launch (their pointers travel in the
// kernel's parameter block, up to kMaxTensorsPerLaunch at a time), grid.x strides over the
// elements of each tensor. Blocks beyond a small tensor's end exit at once.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/grad_norm.cuh"
#include "kernels/cuda/optim.cuh"

namespace rt::cuda {
namespace {

// ---- rounding-explicit arithmetic --------------------------------------------------------
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }
__device__ __forceinline__ float fma_rn(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double fma_rn(double a, double b, double c) { return __fma_rn(a, b, c); }

// ---- kernel parameter blocks -------------------------------------------------------------

struct SgdSlot {
  void* p;
  const void* g;
  void* buf;
  __nv_bfloat16* p_bf16;
  int64_t n;
  double wd;
  int first;
};
struct SgdBatch {
  SgdSlot t[kMaxTensorsPerLaunch];
  double mom, one_minus_damp, neg_lr;
  int momentum, nesterov;
};

struct AdamWSlot {
  void* p;
  const void* g;
  void* m;
  void* v;
  __nv_bfloat16* p_bf16;
  int64_t n;
  double decay, bc2_sqrt, neg_step_size;
};
struct AdamWBatch {
  AdamWSlot t[kMaxTensorsPerLaunch];
  double b1, one_minus_b1, b2, one_minus_b2, eps;
};

struct LarsSlot {
  void* p;
  const void* g;
  void* v;
  int64_t n;
  int64_t row;  // the parameter's index in the whole list: its norms' partials at rows 2*row, 2*row + 1
  double wd;
  int adapt;
};
struct LarsBatch {
  LarsSlot t[kMaxTensorsPerLaunch];
  double lr, mom, eta, eps;
  int nesterov;
};
static_assert(sizeof(SgdBatch) < 4000 && sizeof(AdamWBatch) < 4000 && sizeof(LarsBatch) < 4000,
              "kernel parameters are limited to 4 KiB");

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void sgd_kernel(SgdBatch b) {
  const SgdSlot& s = b.t[blockIdx.y];
  T* p = static_cast<T*>(s.p);
  const T* g = static_cast<const T*>(s.g);
  T* buf = static_cast<T*>(s.buf);
  const bool decay = s.wd != 0.0;
  const T wd = T(s.wd), mom = T(b.mom), one_minus_damp = T(b.one_minus_damp), neg_lr = T(b.neg_lr);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < s.n; i += int64_t(gridDim.x) * blockDim.x) {
    const T pi = p[i];
    T d = decay ? fma_rn(pi, wd, g[i]) : g[i];
    if (b.momentum) {
      const T bb = s.first ? d : fma_rn(d, one_minus_damp, mul_rn(buf[i], mom));
      buf[i] = bb;
      d = b.nesterov ? fma_rn(bb, mom, d) : bb;
    }
    const T np = fma_rn(d, neg_lr, pi);
    p[i] = np;
    if (s.p_bf16 != nullptr) s.p_bf16[i] = __float2bfloat16(float(np));
  }
}

template <typename T>
__global__ void adamw_kernel(AdamWBatch b) {
  const AdamWSlot& s = b.t[blockIdx.y];
  T* p = static_cast<T*>(s.p);
  const T* g = static_cast<const T*>(s.g);
  T* ea = static_cast<T*>(s.m);
  T* eas = static_cast<T*>(s.v);
  const T decay = T(s.decay), bc2_sqrt = T(s.bc2_sqrt), neg_step_size = T(s.neg_step_size);
  const T b1 = T(b.b1), omb1 = T(b.one_minus_b1), b2 = T(b.b2), omb2 = T(b.one_minus_b2), eps = T(b.eps);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < s.n; i += int64_t(gridDim.x) * blockDim.x) {
    const T gi = g[i];
    const T pi = mul_rn(p[i], decay);                                  // param.mul_(1 - lr*wd)
    const T m = fma_rn(gi, omb1, mul_rn(ea[i], b1));                   // exp_avg.mul_(b1).add_(g, 1-b1)
    const T v = fma_rn(mul_rn(omb2, gi), gi, mul_rn(eas[i], b2));      // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
    const T denom = add_rn(div_rn(sqrt_rn(v), bc2_sqrt), eps);         // sqrt(v) / bc2_sqrt + eps
    ea[i] = m;
    eas[i] = v;
    const T np = add_rn(pi, div_rn(mul_rn(neg_step_size, m), denom));  // addcdiv_(m, denom, -step_size)
    p[i] = np;
    if (s.p_bf16 != nullptr) s.p_bf16[i] = __float2bfloat16(float(np));
  }
}

// LARS: every thread adds its tensor's partials in index order (the same sums in every
// thread and block: Note [Deterministic norms] in grad_norm.cu), computes the trust ratio
// in double like optim/update_cpu.cc's lars_trust_ratio, then the fused update.
template <typename T>
__global__ void lars_kernel(LarsBatch b, const T* partials /* [2 * count, kNormBlocks] */) {
  const LarsSlot& s = b.t[blockIdx.y];
  double scaled_lr = b.lr;
  if (s.adapt) {
    const T* pw = partials + 2 * s.row * kNormBlocks;
    const T* pg = pw + kNormBlocks;
    double w2 = 0.0, g2 = 0.0;
    for (int k = 0; k < kNormBlocks; ++k) {
      w2 += double(pw[k]);
      g2 += double(pg[k]);
    }
    const double w_norm = sqrt(w2), g_norm = sqrt(g2);
    const double trust = w_norm > 0.0 && g_norm > 0.0 ? b.eta * w_norm / (g_norm + s.wd * w_norm + b.eps) : 1.0;
    scaled_lr = b.lr * trust;
  }
  T* p = static_cast<T*>(s.p);
  const T* g = static_cast<const T*>(s.g);
  T* v = static_cast<T*>(s.v);
  const bool decay = s.wd != 0.0;
  const T wd = T(s.wd), lr = T(scaled_lr), mom = T(b.mom);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < s.n; i += int64_t(gridDim.x) * blockDim.x) {
    const T pi = p[i];
    const T d = decay ? fma_rn(wd, pi, g[i]) : g[i];  // g + weight_decay * w
    const T step = mul_rn(lr, d);                    // scaled_lr * (...)
    const T vi = fma_rn(mom, v[i], step);            // v = momentum * v + scaled_lr * (...)
    v[i] = vi;
    p[i] = add_rn(pi, -(b.nesterov ? fma_rn(mom, vi, step) : vi));
  }
}

// ---- launchers -------------------------------------------------------------------------

constexpr int kThreads = 256;
constexpr int kMaxBlocksX = 1024;

void check_master_dtype(DType t, const char* op) {
  RT_CHECK(t == DType::f32 || t == DType::f64, op, ": master weights must be f32 or f64, got ", dtype_name(t));
}

// `flops`: the rule's arithmetic per element, for the kernel lab; `f64`: master weights in f64.
template <typename Slot, typename Batch, typename Fill, typename Launch>
void launch_batched(size_t count, Batch& batch, Fill&& fill, Launch&& launch, double flops, bool f64) {
  for (size_t first = 0; first < count; first += kMaxTensorsPerLaunch) {
    const size_t k = std::min<size_t>(kMaxTensorsPerLaunch, count - first);
    int64_t max_n = 0, total = 0;
    for (size_t j = 0; j < k; ++j) {
      const int64_t n = fill(batch.t[j], first + j);
      max_n = std::max(max_n, n);
      total += n;
    }
    if (max_n == 0) continue;
    const dim3 grid(std::min(detail::grid_for(max_n, kThreads), kMaxBlocksX), unsigned(k));
    rt::cuda::flops_hint(flops * double(total), f64);
    launch(grid);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void sgd_update(DType t, const std::vector<SgdTensor>& list, const SgdHyper& h, cudaStream_t s) {
  check_master_dtype(t, "sgd_update");
  for (const SgdTensor& e : list) {
    RT_CHECK(e.n >= 0, "sgd_update: negative element count ", e.n);
    RT_CHECK(e.n == 0 || (e.p && e.g && (h.momentum == 0.0 || e.buf)), "sgd_update: null pointer");
  }
  SgdBatch b{};
  b.mom = h.momentum;
  b.one_minus_damp = 1.0 - h.dampening;
  b.neg_lr = -h.lr;
  b.momentum = h.momentum != 0.0;
  b.nesterov = h.nesterov;
  launch_batched<SgdSlot>(list.size(), b,
                          [&](SgdSlot& slot, size_t i) {
                            const SgdTensor& e = list[i];
                            slot = SgdSlot{e.p, e.g, e.buf, static_cast<__nv_bfloat16*>(e.p_bf16), e.n,
                                           e.weight_decay, int(e.first_step)};
                            return e.n;
                          },
                          [&](dim3 grid) {
                            if (t == DType::f32) RT_LAUNCH(grid, kThreads, 0, s, sgd_kernel<float>)(b);
                            else RT_LAUNCH(grid, kThreads, 0, s, sgd_kernel<double>)(b);
                          },
                          6.0, t == DType::f64);  // decay, momentum and the step: three FMAs
}

void adamw_update(DType t, const std::vector<AdamWTensor>& list, const AdamWHyper& h, cudaStream_t s) {
  check_master_dtype(t, "adamw_update");
  for (const AdamWTensor& e : list) {
    RT_CHECK(e.n >= 0, "adamw_update: negative element count ", e.n);
    RT_CHECK(e.n == 0 || (e.p && e.g && e.exp_avg && e.exp_avg_sq), "adamw_update: null pointer");
    RT_CHECK(e.step >= 1, "adamw_update: step must be >= 1, got ", e.step);
  }
  AdamWBatch b{};
  b.b1 = h.beta1;
  b.one_minus_b1 = 1.0 - h.beta1;
  b.b2 = h.beta2;
  b.one_minus_b2 = 1.0 - h.beta2;
  b.eps = h.eps;
  launch_batched<AdamWSlot>(list.size(), b,
                            [&](AdamWSlot& slot, size_t i) {
                              const AdamWTensor& e = list[i];
                              // Python-side scalars in double, as in optim/update_cpu.cc.
                              const double step = double(e.step);
                              const double bc1 = 1.0 - std::pow(h.beta1, step);
                              const double bc2 = 1.0 - std::pow(h.beta2, step);
                              // volatile: the host compiler must not fuse 1 - lr*wd into an FMA (the
                              // CPU rule is compiled with -ffp-contract=off).
                              const volatile double lr_wd = h.lr * e.weight_decay;
                              slot = AdamWSlot{e.p,  e.g, e.exp_avg, e.exp_avg_sq, static_cast<__nv_bfloat16*>(e.p_bf16),
                                               e.n, 1.0 - lr_wd, std::sqrt(bc2), -(h.lr / bc1)};
                              return e.n;
                            },
                            [&](dim3 grid) {
                              if (t == DType::f32) RT_LAUNCH(grid, kThreads, 0, s, adamw_kernel<float>)(b);
                              else RT_LAUNCH(grid, kThreads, 0, s, adamw_kernel<double>)(b);
                            },
                            14.0, t == DType::f64);  // two moments, a square root, a division, the decay
}

void lars_update(DType t, const std::vector<LarsTensor>& list, const LarsHyper& h, void* partials, cudaStream_t s) {
  check_master_dtype(t, "lars_update");
  if (list.empty()) return;
  RT_CHECK(partials != nullptr, "lars_update: null partials");
  std::vector<const void*> x;  // [2 * count]: w0, g0, w1, g1, ...
  std::vector<int64_t> n;
  for (const LarsTensor& e : list) {
    RT_CHECK(e.n >= 0, "lars_update: negative element count ", e.n);
    RT_CHECK(e.n == 0 || (e.p && e.g && e.v), "lars_update: null pointer");
    // A tensor without the trust ratio needs no norms: its rows are written as zeros.
    x.push_back(e.p);
    x.push_back(e.g);
    n.push_back(e.adapt ? e.n : 0);
    n.push_back(e.adapt ? e.n : 0);
  }
  sum_squares_partials(t, x, n, partials, s);
  LarsBatch b{};
  b.lr = h.lr;
  b.mom = h.momentum;
  b.eta = h.eta;
  b.eps = h.epsilon;
  b.nesterov = h.nesterov;
  launch_batched<LarsSlot>(list.size(), b,
                           [&](LarsSlot& slot, size_t i) {
                             const LarsTensor& e = list[i];
                             slot = LarsSlot{e.p, e.g, e.v, e.n, int64_t(i), e.weight_decay, int(e.adapt)};
                             return e.n;
                           },
                           [&](dim3 grid) {
                             if (t == DType::f32)
                               RT_LAUNCH(grid, kThreads, 0, s, lars_kernel<float>)(b, static_cast<float*>(partials));
                             else
                               RT_LAUNCH(grid, kThreads, 0, s, lars_kernel<double>)(b, static_cast<double*>(partials));
                           },
                           6.0, t == DType::f64);
}

}  // namespace rt::cuda
