// batch_norm kernels: per-channel reductions (NCHW and NHWC), the normalising map, and the
// backward. Statistics accumulate in acc_t<T> (float, or double for f64) and never leave the
// device.
//
// Per-channel reduction, deterministic (fixed block shapes, fixed summation order):
//   NCHW: one block per channel; threads stride over the channel's N*S values.
//   NHWC: one block per 32 channels, threadIdx.x = channel (coalesced rows), threadIdx.y
//         strides over rows; the 32 columns are then summed over y in a fixed order.
// The reduction hands each channel's two sums to an `Out` functor run by one thread, which
// finishes the channel (mean; invstd and running stats; dgamma/dbeta and dx coefficients).
// TODO(perf): one block per channel underfills the GPU when C is small and N*S large;
// split rows over more blocks with a second deterministic pass.
#include "kernels/cuda/batch_norm.cuh"
#include "kernels/cuda/common.cuh"

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::from_acc;
using detail::to_acc;

constexpr int kThreads = 256;
constexpr int kColX = 32, kColY = 16;  // NHWC block: 32 channels x 16 rows

template <typename A>
struct Two {
  A a, b;
};

// ---- kernels ---------------------------------------------------------------------------

template <typename A, typename F, typename Out>
__global__ void channel_reduce_nchw(int64_t N, int64_t C, int64_t S, F f, Out out) {
  __shared__ A smem[kThreads];
  const int64_t c = blockIdx.x, M = N * S;
  A s0 = 0, s1 = 0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const int64_t n = j / S, i = (n * C + c) * S + (j - n * S);
    const Two<A> v = f(c, i);
    s0 += v.a;
    s1 += v.b;
  }
  s0 = detail::block_sum(s0, smem);
  s1 = detail::block_sum(s1, smem);
  if (threadIdx.x == 0) out(c, s0, s1);
}

template <typename A, typename F, typename Out>
__global__ void channel_reduce_nhwc(int64_t M, int64_t C, F f, Out out) {
  __shared__ A sm0[kColY][kColX];
  __shared__ A sm1[kColY][kColX];
  const int64_t c = blockIdx.x * int64_t(kColX) + threadIdx.x;
  A s0 = 0, s1 = 0;
  if (c < C) {
    for (int64_t r = threadIdx.y; r < M; r += kColY) {
      const Two<A> v = f(c, r * C + c);
      s0 += v.a;
      s1 += v.b;
    }
  }
  sm0[threadIdx.y][threadIdx.x] = s0;
  sm1[threadIdx.y][threadIdx.x] = s1;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < kColY; ++y) {
      s0 += sm0[y][threadIdx.x];
      s1 += sm1[y][threadIdx.x];
    }
    out(c, s0, s1);
  }
}

// What is summed.
template <typename T, typename A>
struct SumX {
  const T* x;
  __device__ Two<A> operator()(int64_t, int64_t i) const { return {to_acc(x[i]), A(0)}; }
};
template <typename T, typename A>
struct SumSqDev {
  const T* x;
  const A* mean;
  __device__ Two<A> operator()(int64_t c, int64_t i) const {
    const A d = to_acc(x[i]) - mean[c];
    return {d * d, A(0)};
  }
};
template <typename T, typename A>
struct SumDy {  // sum(dy), sum(dy * (x - mean))
  const T *x, *dy;
  const A* mean;
  __device__ Two<A> operator()(int64_t c, int64_t i) const {
    const A g = to_acc(dy[i]);
    return {g, g * (to_acc(x[i]) - mean[c])};
  }
};

// How a channel is finished.
template <typename A>
struct WriteMean {
  A* mean;
  A M;
  __device__ void operator()(int64_t c, A s, A) const { mean[c] = s / M; }
};
template <typename A, typename R>
struct WriteInvstd {
  A* invstd;
  A M, eps;
  const A* mean;
  R *running_mean, *running_var;  // null: no running statistics
  double momentum;
  __device__ void operator()(int64_t c, A s, A) const {
    const A var = s / M;
    invstd[c] = A(1) / detail::dev_sqrt(var + eps);
    if (running_mean) {
      const double unbiased = double(var) * double(M) / (double(M) - 1.0);
      running_mean[c] = from_acc<R>(acc_t<R>((1.0 - momentum) * double(to_acc(running_mean[c])) + momentum * double(mean[c])));
      running_var[c] = from_acc<R>(acc_t<R>((1.0 - momentum) * double(to_acc(running_var[c])) + momentum * unbiased));
    }
  }
};
template <typename T, typename A>
struct BackwardCoefs {
  const A* invstd;
  const T* gamma;  // null: 1
  bool training;
  A M;
  T *dgamma, *dbeta;  // may be null
  A* coef;            // k[C], a[C], b[C]: dx = k*dy + a*(x - mean) + b
  int64_t C;
  __device__ void operator()(int64_t c, A sum_dy, A sum_dy_xm) const {
    const A is = invstd[c];
    const A sum_dy_xhat = sum_dy_xm * is;
    if (dgamma) dgamma[c] = from_acc<T>(sum_dy_xhat);
    if (dbeta) dbeta[c] = from_acc<T>(sum_dy);
    const A gi = (gamma ? to_acc(gamma[c]) : A(1)) * is;
    coef[c] = gi;
    coef[C + c] = training ? -gi * is * sum_dy_xhat / M : A(0);
    coef[2 * C + c] = training ? -gi * sum_dy / M : A(0);
  }
};

template <typename A, typename R>
__global__ void eval_stats_kernel(int64_t C, const R* rm, const R* rv, double eps, A* mean, A* invstd) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    mean[c] = A(to_acc(rm[c]));
    invstd[c] = A(1.0 / sqrt(double(to_acc(rv[c])) + eps));
  }
}

__device__ __forceinline__ int64_t channel_of(int64_t i, int64_t C, int64_t S, bool nhwc) {
  return nhwc ? i % C : (i / S) % C;
}

template <typename T>
__global__ void apply_kernel(int64_t n, int64_t C, int64_t S, bool nhwc, const T* __restrict__ x,
                             const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ invstd,
                             const T* __restrict__ gamma, const T* __restrict__ beta, T* __restrict__ y) {
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = channel_of(i, C, S, nhwc);
    const A scale = invstd[c] * (gamma ? to_acc(gamma[c]) : A(1));
    const A shift = beta ? to_acc(beta[c]) : A(0);
    y[i] = from_acc<T>((to_acc(x[i]) - mean[c]) * scale + shift);
  }
}

template <typename T>
__global__ void dx_kernel(int64_t n, int64_t C, int64_t S, bool nhwc, const T* __restrict__ x,
                          const T* __restrict__ dy, const acc_t<T>* __restrict__ mean,
                          const acc_t<T>* __restrict__ coef, T* __restrict__ dx) {
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = channel_of(i, C, S, nhwc);
    dx[i] = from_acc<T>(coef[c] * to_acc(dy[i]) + coef[C + c] * (to_acc(x[i]) - mean[c]) + coef[2 * C + c]);
  }
}

// ---- launchers -------------------------------------------------------------------------

void check_geom(const BatchNormGeom& g, const char* op) {
  RT_CHECK(g.N >= 1 && g.C >= 1 && g.S >= 1, op, ": bad geometry N=", g.N, " C=", g.C, " S=", g.S);
}

template <typename A, typename F, typename Out>
void channel_reduce(const BatchNormGeom& g, F f, Out out, cudaStream_t s) {
  if (g.nhwc) {
    const int64_t blocks = (g.C + kColX - 1) / kColX;
    channel_reduce_nhwc<A><<<unsigned(blocks), dim3(kColX, kColY), 0, s>>>(g.N * g.S, g.C, f, out);
  } else {
    channel_reduce_nchw<A><<<unsigned(g.C), kThreads, 0, s>>>(g.N, g.C, g.S, f, out);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void batch_norm_stats(const BatchNormGeom& g, DType t, const void* x, double eps, void* mean, void* invstd, DType rt,
                      void* running_mean, void* running_var, double momentum, cudaStream_t s) {
  check_geom(g, "batch_norm_stats");
  RT_CHECK(g.N * g.S > 1, "batch_norm_stats: needs more than one value per channel");
  RT_CHECK(x && mean && invstd, "batch_norm_stats: null pointer");
  RT_CHECK((running_mean == nullptr) == (running_var == nullptr), "batch_norm_stats: running_mean and running_var go together");
  detail::dispatch_floating(t, "batch_norm_stats", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    auto px = static_cast<const T*>(x);
    auto pm = static_cast<A*>(mean);
    const A M = A(g.N * g.S);
    channel_reduce<A>(g, SumX<T, A>{px}, WriteMean<A>{pm, M}, s);
    detail::dispatch_floating(rt, "batch_norm running stats", [&](auto zr) {
      using R = decltype(zr);
      channel_reduce<A>(g, SumSqDev<T, A>{px, pm},
                        WriteInvstd<A, R>{static_cast<A*>(invstd), M, A(eps), pm, static_cast<R*>(running_mean),
                                          static_cast<R*>(running_var), momentum},
                        s);
    });
  });
}

void batch_norm_eval_stats(int64_t C, DType rt, const void* running_mean, const void* running_var, double eps,
                           DType stat_t, void* mean, void* invstd, cudaStream_t s) {
  RT_CHECK(C >= 1, "batch_norm_eval_stats: bad channel count ", C);
  RT_CHECK(running_mean && running_var && mean && invstd, "batch_norm_eval_stats: null pointer");
  RT_CHECK(stat_t == DType::f32 || stat_t == DType::f64, "batch_norm_eval_stats: statistics are f32 or f64");
  detail::dispatch_floating(rt, "batch_norm_eval_stats", [&](auto zr) {
    using R = decltype(zr);
    auto rm = static_cast<const R*>(running_mean);
    auto rv = static_cast<const R*>(running_var);
    if (stat_t == DType::f64)
      eval_stats_kernel<double, R><<<detail::grid_for(C, kThreads), kThreads, 0, s>>>(
          C, rm, rv, eps, static_cast<double*>(mean), static_cast<double*>(invstd));
    else
      eval_stats_kernel<float, R><<<detail::grid_for(C, kThreads), kThreads, 0, s>>>(
          C, rm, rv, eps, static_cast<float*>(mean), static_cast<float*>(invstd));
    CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_apply(const BatchNormGeom& g, DType t, const void* x, const void* mean, const void* invstd,
                      const void* gamma, const void* beta, void* y, cudaStream_t s) {
  check_geom(g, "batch_norm_apply");
  RT_CHECK(x && mean && invstd && y, "batch_norm_apply: null pointer");
  detail::dispatch_floating(t, "batch_norm_apply", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const int64_t n = g.N * g.C * g.S;
    apply_kernel<T><<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(
        n, g.C, g.S, g.nhwc, static_cast<const T*>(x), static_cast<const A*>(mean), static_cast<const A*>(invstd),
        static_cast<const T*>(gamma), static_cast<const T*>(beta), static_cast<T*>(y));
    CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_backward(const BatchNormGeom& g, DType t, const void* x, const void* dy, const void* mean,
                         const void* invstd, const void* gamma, bool training, void* dx, void* dgamma, void* dbeta,
                         void* workspace, cudaStream_t s) {
  check_geom(g, "batch_norm_backward");
  RT_CHECK(x && dy && mean && invstd && workspace, "batch_norm_backward: null pointer");
  detail::dispatch_floating(t, "batch_norm_backward", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    auto px = static_cast<const T*>(x);
    auto pdy = static_cast<const T*>(dy);
    auto pm = static_cast<const A*>(mean);
    auto coef = static_cast<A*>(workspace);
    channel_reduce<A>(g, SumDy<T, A>{px, pdy, pm},
                      BackwardCoefs<T, A>{static_cast<const A*>(invstd), static_cast<const T*>(gamma), training,
                                          A(g.N * g.S), static_cast<T*>(dgamma), static_cast<T*>(dbeta), coef, g.C},
                      s);
    if (!dx) return;
    const int64_t n = g.N * g.C * g.S;
    dx_kernel<T><<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(n, g.C, g.S, g.nhwc, px, pdy, pm, coef,
                                                                    static_cast<T*>(dx));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace rt::cuda
