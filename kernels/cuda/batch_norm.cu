// batch_norm kernels: per-channel reductions (NCHW and NHWC), the normalising map, and the
// backward. Statistics accumulate in acc_t<T> (float, or double for f64) and never leave the
// device.
//
// Per-channel reductions (statistics; the backward's two sums) run in two stages over a 2-D
// grid of row blocks x channels, deterministic (Note [Two-stage channel reduction] in
// kernels/cuda/channel_reduce.cuh). The statistics take one pass over x: Welford states
// merged with Chan's formula give the mean and the centred sum of squares together.
// The reduction hands each channel's total to an `Out` functor run by one thread, which
// finishes the channel (mean, invstd and running stats; dgamma/dbeta and dx coefficients).
//
// Elementwise passes (apply, dx), memory-bound: one grid-stride kernel moves 16-byte packs
// (Pack<T>: 4 floats, 2 doubles, 8 bf16/f16) when every pointer is 16-byte aligned, then the
// n % W elements left one by one (all of them when a pointer is not aligned), W of them
// per thread. A pack may straddle NCHW rows or NHWC pixels: each of its elements gets its own
// channel. The fused relu / residual variants (Note [Fused batch_norm + relu] in
// kernels/cpu/batch_norm.h) are the same passes with the relu, the residual and the relu's
// mask bits (Note [Relu mask bits] in kernels/cuda/batch_norm.h) switched on.
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/channel_reduce.cuh"
#include "kernels/cuda/common.cuh"

#include <numeric>

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::from_acc;
using detail::Pack;
using detail::to_acc;

constexpr int kThreads = 256;

// ---- reductions: what is folded, and how a channel is finished ---------------------------

// Statistics: x folded into Welford states.
template <typename T>
struct StatsFold {
  using A = acc_t<T>;
  using State = detail::WelfordState<A>;
  static constexpr double kFlopsPerValue = 3;  // a sum and a centred sum of squares (WelfordState::add)
  const T* x;
  template <int U>
  __device__ void fold(State& st, int64_t, const int64_t (&idx)[U], int u) const {
    A v[U] = {};
    RT_UNROLL
    for (int k = 0; k < U; ++k)
      if (k < u) v[k] = to_acc(x[idx[k]]);
    st.add(v, u);
  }
};

// mean, invstd = 1/sqrt(biased var + eps) and, when asked, the running statistics in their
// own dtype R with the unbiased variance.
template <typename A, typename R>
struct WriteStats {
  using Acc = A;
  using Running = R;
  A *mean, *invstd;
  A eps;
  R *running_mean, *running_var;  // null: no running statistics
  double momentum;
  __device__ void operator()(int64_t c, const detail::WelfordState<A>& st) const {
    const A var = st.m2 / A(st.n);
    mean[c] = st.mean;
    invstd[c] = A(1) / detail::dev_sqrt(var + eps);
    if (running_mean) {
      const double M = double(st.n), unbiased = double(var) * M / (M - 1.0);
      running_mean[c] = from_acc<R>(acc_t<R>((1.0 - momentum) * double(to_acc(running_mean[c])) + momentum * double(st.mean)));
      running_var[c] = from_acc<R>(acc_t<R>((1.0 - momentum) * double(to_acc(running_var[c])) + momentum * unbiased));
    }
  }
};

// f(WriteStats<A, R>{...}) with A the statistics type of x's dtype t and R the running
// statistics' dtype rt: the launchers that finish statistics from per-channel moments.
template <typename F>
void with_write_stats(DType t, DType rt, void* mean, void* invstd, double eps, void* running_mean, void* running_var,
                      double momentum, const char* op, F&& f) {
  detail::dispatch_floating(t, op, [&](auto z) {
    using A = acc_t<decltype(z)>;
    detail::dispatch_floating(rt, "batch_norm running stats", [&](auto zr) {
      using R = decltype(zr);
      f(WriteStats<A, R>{static_cast<A*>(mean), static_cast<A*>(invstd), A(eps), static_cast<R*>(running_mean),
                         static_cast<R*>(running_var), momentum});
    });
  });
}

// Bit k of byte i / W: whether element i of relu(bn(x) [+ residual]) was kept
// (Note [Relu mask bits] in kernels/cuda/batch_norm.h).
template <typename T>
__device__ __forceinline__ bool kept(const uint8_t* mask, int64_t i) {
  constexpr int W = Pack<T>::kWidth;
  return (mask[i / W] >> (i % W)) & 1;
}

// Whether the next convolution's prologue kept element x of a channel with coefficients
// scale and bias: its formula, x * scale + bias > 0 in f32 with both roundings
// (Note [Batch norm as the next convolution's prologue] in engine/ops/batch_norm_relu_conv2d.cc).
__device__ __forceinline__ bool prologue_keeps(float x, float scale, float bias) {
  return __fadd_rn(__fmul_rn(x, scale), bias) > 0.0f;
}

// Which elements the backward lets through: all (no relu), those whose bit the fused forward
// set (Note [Relu mask bits] in kernels/cuda/batch_norm.h), or those the prologue kept,
// recomputed from x and the (C) f32 scale and bias (batch_norm_backward_relu_prologue).
struct ReluKeep {
  const uint8_t* bits = nullptr;
  const float *scale = nullptr, *bias = nullptr;
  // Element i of channel c, whose input value is xv; ps, pb: scale[c], bias[c] when scale is set.
  template <typename T, typename A>
  __device__ bool at(int64_t i, A xv, float ps, float pb) const {
    if (bits) return kept<T>(bits, i);
    if (scale) return prologue_keeps(float(xv), ps, pb);
    return true;
  }
  __device__ float scale_of(int64_t c) const { return scale ? scale[c] : 0.0f; }
  __device__ float bias_of(int64_t c) const { return scale ? bias[c] : 0.0f; }
};

// Backward: sum(dz) and sum(dz * (x - mean)); dz = dy where `relu` keeps the element, 0 elsewhere.
template <typename T>
struct BackwardFold {
  using A = acc_t<T>;
  using State = detail::SumState<A>;
  static constexpr double kFlopsPerValue = 4;  // a += dz; b += dz * (x - mean)
  const T *x, *dy;
  ReluKeep relu;
  const A* mean;
  T* dz_out;  // null, or where dz goes (the residual's gradient): each element is visited once
  template <int U>
  __device__ void fold(State& st, int64_t c, const int64_t (&idx)[U], int u) const {
    A g[U] = {}, xv[U] = {};
    bool keep[U];
    const float ps = relu.scale_of(c), pb = relu.bias_of(c);
    RT_UNROLL
    for (int k = 0; k < U; ++k)
      if (k < u) {
        g[k] = to_acc(dy[idx[k]]);
        xv[k] = to_acc(x[idx[k]]);
        keep[k] = relu.at<T>(idx[k], xv[k], ps, pb);
      }
    const A m = mean[c];
    RT_UNROLL
    for (int k = 0; k < U; ++k)
      if (k < u) {
        if (!keep[k]) g[k] = A(0);
        if (dz_out) dz_out[idx[k]] = from_acc<T>(g[k]);
        st.a += g[k];
        st.b += g[k] * (xv[k] - m);
      }
  }
};

// Finishes a channel of the backward: dgamma and dbeta from this process's sums; the dx
// coefficients from the sums over the whole batch (the same sums but under SyncBN, where
// `sums` receives this process's instead and batch_norm_backward_dx_from_sums adds every
// process's).
template <typename T, typename A>
struct BackwardCoefs {
  const A* invstd;
  const A* gamma;  // null: 1 (Note [Batch norm parameters in the statistics dtype])
  bool training;
  A M;                // values per channel the statistics are over
  A *dgamma, *dbeta;  // may be null
  A* coef;            // k[C], a[C], b[C]: dx = k*dy + a*(x - mean) + b
  int64_t C;
  double* sums;  // null, or (SyncBN) sum_dz[C], sum_dz_xmu[C]: written instead of coef
  __device__ void coefs(int64_t c, A sum_dy, A sum_dy_xmu, A m) const {
    const A is = invstd[c], sum_dy_xhat = sum_dy_xmu * is;
    const A gi = (gamma ? gamma[c] : A(1)) * is;
    coef[c] = gi;
    coef[C + c] = training ? -gi * is * sum_dy_xhat / m : A(0);
    coef[2 * C + c] = training ? -gi * sum_dy / m : A(0);
  }
  __device__ void operator()(int64_t c, const detail::SumState<A>& st) const {
    if (dgamma) dgamma[c] = st.b * invstd[c];
    if (dbeta) dbeta[c] = st.a;
    if (sums) {
      sums[c] = double(st.a);
      sums[C + c] = double(st.b);
    } else {
      coefs(c, st.a, st.b, M);
    }
  }
};

// The backward's reduction of two batch norms whose outputs were added, then relu'd
// (Note [Two batch norms in one tail] in engine/ops/dual_batch_norm_add_relu.cc): one dz, kept
// by the forward's bits, and its sums against each input: a = sum(dz), b = sum(dz * (x - mean)),
// c = sum(dz * (r - rmean)), BackwardFold's arithmetic for each.
template <typename T>
struct DualBackwardFold {
  using A = acc_t<T>;
  using State = detail::SumState3<A>;
  static constexpr double kFlopsPerValue = 6;
  const T *x, *r, *dy;
  const uint8_t* bits;
  const A *mean, *rmean;
  template <int U>
  __device__ void fold(State& st, int64_t c, const int64_t (&idx)[U], int u) const {
    A g[U] = {}, xv[U] = {}, rv[U] = {};
    bool keep[U];
    RT_UNROLL
    for (int k = 0; k < U; ++k)
      if (k < u) {
        g[k] = to_acc(dy[idx[k]]);
        xv[k] = to_acc(x[idx[k]]);
        rv[k] = to_acc(r[idx[k]]);
        keep[k] = kept<T>(bits, idx[k]);
      }
    const A m = mean[c], rm = rmean[c];
    RT_UNROLL
    for (int k = 0; k < U; ++k)
      if (k < u) {
        if (!keep[k]) g[k] = A(0);
        st.a += g[k];
        st.b += g[k] * (xv[k] - m);
        st.c += g[k] * (rv[k] - rm);
      }
  }
};

// ... and each batch norm's channel finished from its two sums, as BackwardCoefs does.
template <typename T, typename A>
struct DualBackwardCoefs {
  BackwardCoefs<T, A> x, r;
  __device__ void operator()(int64_t c, const detail::SumState3<A>& st) const {
    x(c, detail::SumState<A>{st.a, st.b});
    r(c, detail::SumState<A>{st.a, st.c});
  }
};

// SyncBN forward, the local reduction's finish: this process's block (count, mean[C], m2[C]).
template <typename A>
struct WriteMoments {
  double* block;
  int64_t C;
  double count;
  __device__ void operator()(int64_t c, const detail::WelfordState<A>& st) const {
    if (c == 0) block[0] = count;
    block[1 + c] = double(st.mean);
    block[1 + C + c] = double(st.m2);
  }
};

// SyncBN forward: k blocks merged per channel in process order (the host's merge_moments
// does the same merges: engine/ops/batch_norm.cc), then finished like a local reduction.
template <typename A, typename R>
__global__ void merge_moments_kernel(int64_t C, int k, const double* blocks, double* count, WriteStats<A, R> out) {
  const int64_t stride = 1 + 2 * C;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    detail::WelfordState<double> st = detail::WelfordState<double>::empty();
    for (int i = 0; i < k; ++i) {
      const double* b = blocks + i * stride;
      st.merge(detail::WelfordState<double>{b[1 + c], b[1 + C + c], int64_t(b[0])});
    }
    if (c == 0) *count = double(st.n);
    out(c, detail::WelfordState<A>{A(st.mean), A(st.m2), st.n});
  }
}

// SyncBN backward: k processes' sums added per channel in process order, then the dx
// coefficients with the global count.
template <typename T, typename A>
__global__ void sync_coefs_kernel(int k, const double* sums, const double* count, BackwardCoefs<T, A> f) {
  const int64_t C = f.C;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    double a = 0, b = 0;
    for (int i = 0; i < k; ++i) {
      a += sums[i * 2 * C + c];
      b += sums[i * 2 * C + C + c];
    }
    f.coefs(c, A(a), A(b), A(*count));
  }
}

// The backward's workspace: coef (3*C of A), then the partial sums, 16-byte aligned.
template <typename A>
size_t coef_bytes(int64_t C) {
  return (size_t(3 * C) * sizeof(A) + 15) / 16 * 16;
}

// Statistics from sums (batch_norm_stats_from_sums): the moments in double, then as a
// Welford state (mean, m2 = var * n) so WriteStats writes them as every other path does.
template <typename A, typename R>
__global__ void sums_stats_kernel(int64_t C, int64_t count, const float* sum, const float* sqsum,
                                  WriteStats<A, R> out) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    const double n = double(count), mean = double(sum[c]) / n;
    // f32 sums of y and y^2 lose the variance to cancellation when |mean| >> std; a negative
    // difference is rounding, not a variance. (Not fmax: a NaN sum must stay NaN.)
    const double d = double(sqsum[c]) / n - mean * mean, var = d < 0.0 ? 0.0 : d;
    out(c, detail::WelfordState<A>{A(mean), A(var * n), count});
  }
}

// The prologue's coefficients (batch_norm_prologue_coefs), one rounding per operation.
__global__ void prologue_coefs_kernel(int64_t C, const float* mean, const float* invstd, const float* gamma,
                                      const float* beta, float* scale, float* bias) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    const float sc = __fmul_rn(gamma ? gamma[c] : 1.0f, invstd[c]);
    scale[c] = sc;
    bias[c] = __fsub_rn(beta ? beta[c] : 0.0f, __fmul_rn(mean[c], sc));
  }
}

template <typename A, typename R>
__global__ void eval_stats_kernel(int64_t C, const R* rm, const R* rv, double eps, A* mean, A* invstd) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    mean[c] = A(to_acc(rm[c]));
    invstd[c] = A(1.0 / sqrt(double(to_acc(rv[c])) + eps));
  }
}

// op over the n elements: op.pack(p, channels) for the 16-byte packs p < n / W when `vec`,
// then op.one(i, channel) for the elements left (all of them without `vec`), a group of the
// W elements of one pack position per thread, and op.group_done(p, bits) with the bits
// op.one returned (Note [Relu mask bits] in kernels/cuda/batch_norm.h: one thread per
// mask byte).
template <typename T, typename Op>
__global__ void channel_map_kernel(int64_t n, int64_t C, int64_t S, bool vec, Op op) {
  constexpr int W = Pack<T>::kWidth;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  const int64_t np = vec ? n / W : 0;
  if (first < np) {
    detail::ChannelWalk w(first * W, step * W, C, S);
    for (int64_t p = first; p < np; p += step, w.advance()) {
      int64_t c[W];
      w.channels<W>(c);
      op.pack(p, c);
    }
  }
  const int64_t groups = (n + W - 1) / W;
  for (int64_t p = np + first; p < groups; p += step) {
    const int64_t end = p * W + W < n ? p * W + W : n;
    uint32_t bits = 0;
    for (int64_t i = p * W; i < end; ++i) bits |= op.one(i, (i / S) % C) << (i - p * W);
    op.group_done(p, bits);
  }
}

// Note [Channel-stationary packs]
// In NHWC the W elements of a pack are W consecutive channels, so channel_map_kernel's op
// loads W coefficients of every per-channel array for every pack, each a warp-wide gather
// 32 bytes apart per lane: the kernel lab measured 14% sector efficiency for the apply and
// dx passes of ResNet50's channels-last step (eight 32-sector loads per array for one
// 16-sector load of data). When C is a multiple of W, channel_rows_kernel instead gives
// each thread one pack position q of every pixel it visits (Q = C / W positions per pixel,
// the grid's thread count a multiple of Q): it loads its W channels' coefficients once, in
// 16-byte vectors, and strides over kRowsPerThread pixels or more, and a warp's packs stay
// consecutive in memory. The coefficients' loads then cost a 16th of the data's or less
// (the grid grows with the batch, so this holds at every batch). The arithmetic per element
// is the same function of the same values (ApplyOp::apply, DxOp::dx_of).
constexpr int64_t kRowsPerThread = 16;

// The W values p[c0 .. c0 + W), c0 a multiple of W and p + c0 16-byte aligned, in 16-byte loads.
template <int W, typename A>
__device__ __forceinline__ void load_channels(const A* p, int64_t c0, A (&out)[W]) {
  constexpr int V = Pack<A>::kWidth;
  static_assert(W % V == 0, "a pack's channels are whole vectors of coefficients");
  RT_UNROLL
  for (int j = 0; j < W / V; ++j) {
    const Pack<A> q = reinterpret_cast<const Pack<A>*>(p + c0)[j];
    RT_UNROLL
    for (int k = 0; k < V; ++k) out[j * V + k] = q.v[k];
  }
}
template <typename T, typename Op>
__global__ void channel_rows_kernel(int64_t rows, int64_t Q, Op op) {
  constexpr int W = Pack<T>::kWidth;
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, threads = int64_t(gridDim.x) * blockDim.x;
  const int64_t q = t % Q;
  if (t / Q >= rows) return;
  const typename Op::template Coefs<W> k = op.template coefs<W>(q * W);
  for (int64_t r = t / Q; r < rows; r += threads / Q) op.pack_with(r * Q + q, k);
}

template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p, int64_t i) {
  return reinterpret_cast<const Pack<T>*>(p)[i];
}
template <typename T>
__device__ __forceinline__ void store_pack(T* p, int64_t i, const Pack<T>& v) {
  reinterpret_cast<Pack<T>*>(p)[i] = v;
}

// A batch norm's per-channel arrays in the statistics type A, as its kernels read them.
template <typename A>
struct Norm {
  const A *mean, *invstd;
  const A *gamma, *beta;  // null: 1 and 0 (Note [Batch norm parameters in the statistics dtype])
  __device__ A scale_of(int64_t c) const { return invstd[c] * (gamma ? gamma[c] : A(1)); }
  __device__ A shift_of(int64_t c) const { return beta ? beta[c] : A(0); }
  // Channels c0 .. c0 + W - 1, loaded once (Note [Channel-stationary packs]).
  template <int W>
  struct Coefs {
    A m[W], scale[W], shift[W];
  };
  template <int W>
  __device__ Coefs<W> coefs(int64_t c0) const {
    Coefs<W> k;
    A is[W];
    load_channels<W>(mean, c0, k.m);
    load_channels<W>(invstd, c0, is);
    A gv[W], bv[W];
    if (gamma) load_channels<W>(gamma, c0, gv);
    if (beta) load_channels<W>(beta, c0, bv);
    RT_UNROLL
    for (int j = 0; j < W; ++j) {
      k.scale[j] = is[j] * (gamma ? gv[j] : A(1));  // scale_of's product
      k.shift[j] = beta ? bv[j] : A(0);
    }
    return k;
  }
};

// Forward: y = (x - mean) * invstd * gamma + beta [+ res], then max(y, 0) with relu (NaN
// stays NaN, like relu). gamma, beta, res may be null. kDual: res is normalised by its own
// batch norm `rn` first, in A, unrounded (Note [Two batch norms in one tail] in
// engine/ops/dual_batch_norm_add_relu.cc).
template <typename T, bool kDual = false>
struct ApplyOp {
  using A = acc_t<T>;
  const T *x, *res;
  Norm<A> n;
  bool relu;
  T* y;
  uint8_t* mask;  // null, or the relu's bits (Note [Relu mask bits] in kernels/cuda/batch_norm.h)
  Norm<A> rn;     // kDual only: the residual's batch norm
  __device__ A apply(A xv, A rv, A m, A scale, A shift, A rm, A rscale, A rshift) const {
    A v = (xv - m) * scale + shift;
    if constexpr (kDual) v += (rv - rm) * rscale + rshift;
    else if (res) v += rv;
    return relu && v < A(0) ? A(0) : v;
  }
  __device__ A value(A xv, A rv, int64_t c) const {
    if constexpr (kDual) return apply(xv, rv, n.mean[c], n.scale_of(c), n.shift_of(c), rn.mean[c], rn.scale_of(c),
                                      rn.shift_of(c));
    return apply(xv, rv, n.mean[c], n.scale_of(c), n.shift_of(c), A(0), A(0), A(0));
  }
  template <int W>
  struct Coefs {
    typename Norm<A>::template Coefs<W> k, r;  // r: kDual only
  };
  template <int W>
  __device__ Coefs<W> coefs(int64_t c0) const {
    Coefs<W> k;
    k.k = n.template coefs<W>(c0);
    if constexpr (kDual) k.r = rn.template coefs<W>(c0);
    return k;
  }
  template <int W>
  __device__ void pack_with(int64_t p, const Coefs<W>& c) const {
    const Pack<T> px = load_pack(x, p);
    Pack<T> pr;
    if (res) pr = load_pack(res, p);
    Pack<T> py;
    RT_UNROLL
    for (int j = 0; j < W; ++j) {
      A rm = 0, rscale = 0, rshift = 0;
      if constexpr (kDual) rm = c.r.m[j], rscale = c.r.scale[j], rshift = c.r.shift[j];
      py.v[j] = from_acc<T>(apply(to_acc(px.v[j]), res ? to_acc(pr.v[j]) : A(0), c.k.m[j], c.k.scale[j],
                                  c.k.shift[j], rm, rscale, rshift));
    }
    store_pack(y, p, py);
    store_bits<W>(p, py);
  }
  // The pack's bits: its stored outputs > 0.
  template <int W>
  __device__ void store_bits(int64_t p, const Pack<T>& py) const {
    if (!mask) return;
    uint32_t bits = 0;
    RT_UNROLL
    for (int j = 0; j < W; ++j) bits |= uint32_t(to_acc(py.v[j]) > A(0)) << j;
    mask[p] = uint8_t(bits);
  }
  __device__ uint32_t one(int64_t i, int64_t c) const {
    const T v = from_acc<T>(value(to_acc(x[i]), res ? to_acc(res[i]) : A(0), c));
    y[i] = v;
    return to_acc(v) > A(0);
  }
  __device__ void group_done(int64_t p, uint32_t bits) const {
    if (mask) mask[p] = uint8_t(bits);
  }
  template <int W>
  __device__ void pack(int64_t p, const int64_t (&c)[W]) const {
    const Pack<T> px = load_pack(x, p);
    Pack<T> pr;
    if (res) pr = load_pack(res, p);
    Pack<T> py;
    RT_UNROLL
    for (int k = 0; k < W; ++k) py.v[k] = from_acc<T>(value(to_acc(px.v[k]), res ? to_acc(pr.v[k]) : A(0), c[k]));
    store_pack(y, p, py);
    store_bits<W>(p, py);
  }
};

// Backward: dz = dy where `relu` keeps the element, 0 elsewhere; dx = k*dz + a*(x - mean) + b
// with coef = k[C], a[C], b[C].
template <typename T>
struct DxOp {
  using A = acc_t<T>;
  const T *x, *dy;
  ReluKeep relu;
  const A *mean, *coef;
  int64_t C;
  T* dx;
  __device__ A dx_of(A g, bool keep, A xv, A k, A a, A b, A m) const {
    const A z = keep ? g : A(0);
    return k * z + a * (xv - m) + b;
  }
  __device__ A value(A g, bool keep, A xv, int64_t c) const {
    return dx_of(g, keep, xv, coef[c], coef[C + c], coef[2 * C + c], mean[c]);
  }
  // Channels c0 .. c0 + W - 1, loaded once (Note [Channel-stationary packs]).
  template <int W>
  struct Coefs {
    A k[W], a[W], b[W], m[W];
    float ps[W], pb[W];  // the prologue's scale and bias (ReluKeep), when it has them
  };
  template <int W>
  __device__ Coefs<W> coefs(int64_t c0) const {
    Coefs<W> r;
    load_channels<W>(coef, c0, r.k);
    load_channels<W>(coef + C, c0, r.a);
    load_channels<W>(coef + 2 * C, c0, r.b);
    load_channels<W>(mean, c0, r.m);
    if constexpr (W % Pack<float>::kWidth == 0) {  // in 16-byte loads, as the others
      if (relu.scale) {
        load_channels<W>(relu.scale, c0, r.ps);
        load_channels<W>(relu.bias, c0, r.pb);
        return r;
      }
    }
    RT_UNROLL
    for (int j = 0; j < W; ++j) r.ps[j] = relu.scale_of(c0 + j), r.pb[j] = relu.bias_of(c0 + j);
    return r;
  }
  // The keep bits of pack p (element j in bit j) whose x values are px.
  template <int W, typename F>
  __device__ uint32_t keep_bits(int64_t p, const Pack<T>& px, F&& channel_coefs) const {
    if (relu.bits) return relu.bits[p];
    if (!relu.scale) return 0xFFu;
    uint32_t bits = 0;
    RT_UNROLL
    for (int j = 0; j < W; ++j) {
      float ps, pb;
      channel_coefs(j, ps, pb);
      bits |= uint32_t(prologue_keeps(float(to_acc(px.v[j])), ps, pb)) << j;
    }
    return bits;
  }
  template <int W>
  __device__ void pack_with(int64_t p, const Coefs<W>& r) const {
    const Pack<T> pdy = load_pack(dy, p), px = load_pack(x, p);
    const uint32_t bits = keep_bits<W>(p, px, [&](int j, float& ps, float& pb) { ps = r.ps[j], pb = r.pb[j]; });
    Pack<T> pdx;
    RT_UNROLL
    for (int j = 0; j < W; ++j)
      pdx.v[j] = from_acc<T>(
          dx_of(to_acc(pdy.v[j]), (bits >> j) & 1, to_acc(px.v[j]), r.k[j], r.a[j], r.b[j], r.m[j]));
    store_pack(dx, p, pdx);
  }
  __device__ uint32_t one(int64_t i, int64_t c) const {
    const A xv = to_acc(x[i]);
    dx[i] = from_acc<T>(value(to_acc(dy[i]), relu.at<T>(i, xv, relu.scale_of(c), relu.bias_of(c)), xv, c));
    return 0;
  }
  __device__ void group_done(int64_t, uint32_t) const {}
  template <int W>
  __device__ void pack(int64_t p, const int64_t (&c)[W]) const {
    const Pack<T> pdy = load_pack(dy, p), px = load_pack(x, p);
    const uint32_t bits =
        keep_bits<W>(p, px, [&](int k, float& ps, float& pb) { ps = relu.scale_of(c[k]), pb = relu.bias_of(c[k]); });
    Pack<T> pdx;
    RT_UNROLL
    for (int k = 0; k < W; ++k)
      pdx.v[k] = from_acc<T>(value(to_acc(pdy.v[k]), (bits >> k) & 1, to_acc(px.v[k]), c[k]));
    store_pack(dx, p, pdx);
  }
};

// The dx pass of the two batch norms (dual_batch_norm_backward_relu): dz from dy and the
// forward's bits, read once, then DxOp's arithmetic for each: dx = k*dz + a*(x - mean) + b
// from x's coefficients and dr likewise from r's. Either output may be null.
template <typename T>
struct DualDxOp {
  using A = acc_t<T>;
  DxOp<T> x, r;  // their dy and bits are the same
  template <int W>
  struct Coefs {
    typename DxOp<T>::template Coefs<W> x, r;
  };
  template <int W>
  __device__ Coefs<W> coefs(int64_t c0) const {
    return {x.template coefs<W>(c0), r.template coefs<W>(c0)};
  }
  // Pack p: element j's dx = fx(j, dy, keep, x) and dr = fr(j, dy, keep, r) (dx_of masks dy
  // by keep); the callers differ only in where each channel's coefficients come from.
  template <int W, typename Fx, typename Fr>
  __device__ void pack_by(int64_t p, Fx fx, Fr fr) const {
    const Pack<T> pdy = load_pack(x.dy, p), px = load_pack(x.x, p), pr = load_pack(r.x, p);
    const uint32_t bits = x.relu.bits[p];
    Pack<T> pdx, pdr;
    RT_UNROLL
    for (int j = 0; j < W; ++j) {
      const A g = to_acc(pdy.v[j]);
      const bool keep = (bits >> j) & 1;
      pdx.v[j] = from_acc<T>(fx(j, g, keep, to_acc(px.v[j])));
      pdr.v[j] = from_acc<T>(fr(j, g, keep, to_acc(pr.v[j])));
    }
    if (x.dx) store_pack(x.dx, p, pdx);
    if (r.dx) store_pack(r.dx, p, pdr);
  }
  template <int W>
  __device__ void pack_with(int64_t p, const Coefs<W>& k) const {
    pack_by<W>(
        p, [&](int j, A g, bool keep, A v) { return x.dx_of(g, keep, v, k.x.k[j], k.x.a[j], k.x.b[j], k.x.m[j]); },
        [&](int j, A g, bool keep, A v) { return r.dx_of(g, keep, v, k.r.k[j], k.r.a[j], k.r.b[j], k.r.m[j]); });
  }
  __device__ uint32_t one(int64_t i, int64_t c) const {
    const A g = to_acc(x.dy[i]);
    const bool keep = kept<T>(x.relu.bits, i);
    if (x.dx) x.dx[i] = from_acc<T>(x.value(g, keep, to_acc(x.x[i]), c));
    if (r.dx) r.dx[i] = from_acc<T>(r.value(g, keep, to_acc(r.x[i]), c));
    return 0;
  }
  __device__ void group_done(int64_t, uint32_t) const {}
  template <int W>
  __device__ void pack(int64_t p, const int64_t (&c)[W]) const {
    pack_by<W>(
        p, [&](int j, A g, bool keep, A v) { return x.value(g, keep, v, c[j]); },
        [&](int j, A g, bool keep, A v) { return r.value(g, keep, v, c[j]); });
  }
};

// ---- launchers -------------------------------------------------------------------------

void check_geom(const BatchNormGeom& g, const char* op) {
  RT_CHECK(g.N >= 1 && g.C >= 1 && g.S >= 1, op, ": bad geometry N=", g.N, " C=", g.C, " S=", g.S);
}

// Runs an elementwise op over the tensor, in 16-byte packs when every pointer allows;
// `coefs`: the per-channel arrays the op reads (Note [Channel-stationary packs] reads them
// as vectors); `flops`: the op's arithmetic per element, for the kernel lab.
template <typename T, typename Op>
void launch_channel_map(const BatchNormGeom& g, std::initializer_list<const void*> ptrs,
                        std::initializer_list<const void*> coefs, Op op, double flops, cudaStream_t s) {
  constexpr int W = Pack<T>::kWidth;
  bool vec = true;
  for (const void* p : ptrs) vec = vec && detail::aligned16(p);
  const int64_t n = g.N * g.C * g.S;
  rt::cuda::flops_hint(flops * double(n), std::is_same_v<T, double>);
  bool coefs_vec = true;
  for (const void* p : coefs) coefs_vec = coefs_vec && detail::aligned16(p);
  if (vec && coefs_vec && g.nhwc && g.C % W == 0) {  // Note [Channel-stationary packs]
    const int64_t rows = g.N * g.S, Q = g.C / W;
    // Blocks in multiples of `unit`, so that the grid's threads are a multiple of Q.
    const int64_t unit = Q / std::gcd<int64_t>(Q, kThreads);
    const int64_t want = ((rows + kRowsPerThread - 1) / kRowsPerThread * Q + kThreads - 1) / kThreads;
    const int64_t blocks = std::max<int64_t>(unit, std::min<int64_t>(want + unit - 1, 65535) / unit * unit);
    RT_LAUNCH(unsigned(blocks), kThreads, 0, s, channel_rows_kernel<T, Op>)(rows, Q, op);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t work = vec ? std::max<int64_t>(n / W, 1) : (n + W - 1) / W;  // packs, or groups of W
  RT_LAUNCH(detail::grid_for(work, kThreads), kThreads, 0, s, channel_map_kernel<T>)(n, g.C, g.nhwc ? 1 : g.S, vec, op);
  CUDA_CHECK_LAUNCH();
}

void apply_impl(const BatchNormGeom& g, DType t, const void* x, const void* residual, bool relu, const void* mean,
                const void* invstd, const void* gamma, const void* beta, void* y, uint8_t* mask, cudaStream_t s,
                const char* op) {
  check_geom(g, op);
  RT_CHECK(x && mean && invstd && y, op, ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const ApplyOp<T> f{static_cast<const T*>(x),
                       static_cast<const T*>(residual),
                       Norm<A>{static_cast<const A*>(mean), static_cast<const A*>(invstd), static_cast<const A*>(gamma),
                               static_cast<const A*>(beta)},
                       relu,
                       static_cast<T*>(y),
                       mask,
                       {}};
    // (x - mean) * (invstd * gamma) + beta [+ res], then the relu: 5 or 6 operations.
    launch_channel_map<T>(g, {x, residual, y}, {mean, invstd, gamma, beta}, f, residual ? 6.0 : 5.0, s);
  });
}

// The backward's reduction (pass 1). mask: null, or the fused forward's relu bits
// (Note [Relu mask bits] in kernels/cuda/batch_norm.h). The residual's gradient dres is dz
// itself: the reduction writes it, and the dx pass reads it back as its dy (no mask, one read
// less), as kernels/cpu/batch_norm.cc does. Writes the dx coefficients at the start of the
// workspace, or this process's sums into `sums` (SyncBN) instead.
template <typename T>
void backward_reduce(const BatchNormGeom& g, const T* x, ReluKeep relu, const T* dy, const acc_t<T>* mean,
                     const acc_t<T>* invstd, const acc_t<T>* gamma, bool training, acc_t<T>* dgamma,
                     acc_t<T>* dbeta, T* dres, double* sums, void* workspace, cudaStream_t s) {
  using A = acc_t<T>;
  const detail::ChannelReducePlan plan = detail::plan_channel_reduce(g.N, g.C, g.S, g.nhwc);
  auto part = reinterpret_cast<detail::SumState<A>*>(static_cast<char*>(workspace) + coef_bytes<A>(g.C));
  detail::channel_reduce<T>(plan, BackwardFold<T>{x, dy, relu, mean, relu.bits ? dres : nullptr},
                            BackwardCoefs<T, A>{invstd, gamma, training, A(g.N * g.S), dgamma, dbeta,
                                                static_cast<A*>(workspace), g.C, sums},
                            part, s);
}

// The dx pass (pass 2) with the coefficients at the start of the workspace; dz read from
// dres when the reduction wrote it there.
template <typename T>
void backward_dx(const BatchNormGeom& g, const T* x, ReluKeep relu, const T* dy, const T* dres,
                 const acc_t<T>* mean, const void* workspace, T* dx, cudaStream_t s) {
  if (relu.bits && dres) {  // dz is in dres now
    dy = dres;
    relu = ReluKeep{};
  }
  const DxOp<T> f{x, dy, relu, mean, static_cast<const acc_t<T>*>(workspace), g.C, dx};
  // k*z + a*(x - mean) + b (and the prologue's keep test); coef's three arrays are C apart
  // (C a multiple of W keeps each aligned).
  launch_channel_map<T>(g, {x, dy, dx},
                        {workspace, static_cast<const acc_t<T>*>(workspace) + g.C, mean, relu.scale, relu.bias}, f,
                        relu.scale ? 7.0 : 5.0, s);
}

void backward_impl(const BatchNormGeom& g, DType t, const void* x, ReluKeep relu, const void* dy,
                   const void* mean, const void* invstd, const void* gamma, bool training, void* dx, void* dgamma,
                   void* dbeta, void* dres, void* workspace, cudaStream_t s, const char* op) {
  check_geom(g, op);
  RT_CHECK(x && dy && mean && invstd && workspace, op, ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    backward_reduce<T>(g, static_cast<const T*>(x), relu, static_cast<const T*>(dy), static_cast<const A*>(mean),
                       static_cast<const A*>(invstd), static_cast<const A*>(gamma), training,
                       static_cast<A*>(dgamma), static_cast<A*>(dbeta), static_cast<T*>(dres), nullptr, workspace, s);
    if (dx)
      backward_dx<T>(g, static_cast<const T*>(x), relu, static_cast<const T*>(dy), static_cast<const T*>(dres),
                     static_cast<const A*>(mean), workspace, static_cast<T*>(dx), s);
  });
}

}  // namespace

size_t batch_norm_stats_workspace_bytes(const BatchNormGeom& g, DType t) {
  check_geom(g, "batch_norm_stats");
  size_t bytes = 0;
  detail::dispatch_floating(t, "batch_norm_stats", [&](auto z) {
    using A = acc_t<decltype(z)>;
    bytes = detail::channel_partials_bytes<detail::WelfordState<A>>(detail::plan_channel_reduce(g.N, g.C, g.S, g.nhwc));
  });
  return bytes;
}

size_t batch_norm_backward_workspace_bytes(const BatchNormGeom& g, DType t) {
  check_geom(g, "batch_norm_backward");
  size_t bytes = 0;
  detail::dispatch_floating(t, "batch_norm_backward", [&](auto z) {
    using A = acc_t<decltype(z)>;
    bytes = coef_bytes<A>(g.C) +
            detail::channel_partials_bytes<detail::SumState<A>>(detail::plan_channel_reduce(g.N, g.C, g.S, g.nhwc));
  });
  return bytes;
}

void batch_norm_stats(const BatchNormGeom& g, DType t, const void* x, double eps, void* mean, void* invstd, DType rt,
                      void* running_mean, void* running_var, double momentum, void* workspace, cudaStream_t s) {
  check_geom(g, "batch_norm_stats");
  RT_CHECK(g.N * g.S > 1, "batch_norm_stats: needs more than one value per channel");
  RT_CHECK(x && mean && invstd && workspace, "batch_norm_stats: null pointer");
  RT_CHECK((running_mean == nullptr) == (running_var == nullptr), "batch_norm_stats: running_mean and running_var go together");
  detail::dispatch_floating(t, "batch_norm_stats", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const detail::ChannelReducePlan plan = detail::plan_channel_reduce(g.N, g.C, g.S, g.nhwc);
    auto part = static_cast<detail::WelfordState<A>*>(workspace);
    detail::dispatch_floating(rt, "batch_norm running stats", [&](auto zr) {
      using R = decltype(zr);
      detail::channel_reduce<T>(plan, StatsFold<T>{static_cast<const T*>(x)},
                                WriteStats<A, R>{static_cast<A*>(mean), static_cast<A*>(invstd), A(eps),
                                                 static_cast<R*>(running_mean), static_cast<R*>(running_var), momentum},
                                part, s);
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
      RT_LAUNCH(detail::grid_for(C, kThreads), kThreads, 0, s, eval_stats_kernel<double, R>)(
          C, rm, rv, eps, static_cast<double*>(mean), static_cast<double*>(invstd));
    else
      RT_LAUNCH(detail::grid_for(C, kThreads), kThreads, 0, s, eval_stats_kernel<float, R>)(
          C, rm, rv, eps, static_cast<float*>(mean), static_cast<float*>(invstd));
    CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_stats_from_sums(int64_t C, DType t, int64_t count, const float* sum, const float* sqsum, double eps,
                                void* mean, void* invstd, DType rt, void* running_mean, void* running_var,
                                double momentum, cudaStream_t s) {
  const char* op = "batch_norm_stats_from_sums";
  RT_CHECK(C >= 1, op, ": bad channel count ", C);
  RT_CHECK(count > 1, op, ": training needs more than one value per channel, got ", count);
  RT_CHECK(sum && sqsum && mean && invstd, op, ": null pointer");
  RT_CHECK((running_mean == nullptr) == (running_var == nullptr), op, ": running_mean and running_var go together");
  with_write_stats(t, rt, mean, invstd, eps, running_mean, running_var, momentum, op, [&](auto out) {
    using Out = decltype(out);
    RT_LAUNCH(detail::grid_for(C, kThreads), kThreads, 0, s,
              sums_stats_kernel<typename Out::Acc, typename Out::Running>)(C, count, sum, sqsum, out);
    CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_apply(const BatchNormGeom& g, DType t, const void* x, const void* mean, const void* invstd,
                      const void* gamma, const void* beta, void* y, cudaStream_t s) {
  apply_impl(g, t, x, nullptr, false, mean, invstd, gamma, beta, y, nullptr, s, "batch_norm_apply");
}

void batch_norm_apply_relu(const BatchNormGeom& g, DType t, const void* x, const void* residual, const void* mean,
                           const void* invstd, const void* gamma, const void* beta, void* y, uint8_t* mask,
                           cudaStream_t s) {
  apply_impl(g, t, x, residual, true, mean, invstd, gamma, beta, y, mask, s, "batch_norm_apply_relu");
}

size_t batch_norm_relu_mask_bytes(const BatchNormGeom& g, DType t) {
  check_geom(g, "batch_norm_relu_mask_bytes");
  int64_t W = 1;
  detail::dispatch_floating(t, "batch_norm_relu_mask_bytes", [&](auto z) { W = Pack<decltype(z)>::kWidth; });
  return size_t((g.N * g.C * g.S + W - 1) / W);
}

void batch_norm_backward(const BatchNormGeom& g, DType t, const void* x, const void* dy, const void* mean,
                         const void* invstd, const void* gamma, bool training, void* dx, void* dgamma, void* dbeta,
                         void* workspace, cudaStream_t s) {
  backward_impl(g, t, x, ReluKeep{}, dy, mean, invstd, gamma, training, dx, dgamma, dbeta, nullptr, workspace, s,
                "batch_norm_backward");
}

void batch_norm_backward_relu(const BatchNormGeom& g, DType t, const void* x, const uint8_t* mask, const void* dy,
                              const void* mean, const void* invstd, const void* gamma, bool training, void* dx,
                              void* dgamma, void* dbeta, void* dresidual, void* workspace, cudaStream_t s) {
  RT_CHECK(mask, "batch_norm_backward_relu: null pointer (the forward's relu mask)");
  backward_impl(g, t, x, ReluKeep{mask}, dy, mean, invstd, gamma, training, dx, dgamma, dbeta, dresidual, workspace,
                s, "batch_norm_backward_relu");
}

void batch_norm_prologue_coefs(int64_t C, const float* mean, const float* invstd, const float* gamma,
                               const float* beta, float* scale, float* bias, cudaStream_t s) {
  RT_CHECK(C >= 1, "batch_norm_prologue_coefs: bad channel count ", C);
  RT_CHECK(mean && invstd && scale && bias, "batch_norm_prologue_coefs: null pointer");
  RT_LAUNCH(detail::grid_for(C, kThreads), kThreads, 0, s, prologue_coefs_kernel)(C, mean, invstd, gamma, beta, scale,
                                                                                  bias);
  CUDA_CHECK_LAUNCH();
}

void batch_norm_backward_relu_prologue(const BatchNormGeom& g, DType t, const void* x, const float* scale,
                                       const float* bias, const void* dy, const void* mean, const void* invstd,
                                       const void* gamma, bool training, void* dx, void* dgamma, void* dbeta,
                                       void* workspace, cudaStream_t s) {
  const char* op = "batch_norm_backward_relu_prologue";
  RT_CHECK(scale && bias, op, ": null pointer (the prologue's scale and bias)");
  RT_CHECK(batch_norm_stat_dtype(t) == DType::f32, op, ": the prologue is f32, so x is f32, bf16 or f16, got ",
           dtype_name(t));
  backward_impl(g, t, x, ReluKeep{nullptr, scale, bias}, dy, mean, invstd, gamma, training, dx, dgamma, dbeta, nullptr,
                workspace, s, op);
}

namespace {
template <typename A>
Norm<A> norm_of(const BatchNormChannels& b) {
  return Norm<A>{static_cast<const A*>(b.mean), static_cast<const A*>(b.invstd), static_cast<const A*>(b.gamma),
                 static_cast<const A*>(b.beta)};
}
}  // namespace

void dual_batch_norm_apply_relu(const BatchNormGeom& g, DType t, const void* x, const BatchNormChannels& a,
                                const void* r, const BatchNormChannels& b, void* y, uint8_t* mask, cudaStream_t s) {
  const char* op = "dual_batch_norm_apply_relu";
  check_geom(g, op);
  RT_CHECK(x && r && a.mean && a.invstd && b.mean && b.invstd && y, op, ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const ApplyOp<T, true> f{static_cast<const T*>(x), static_cast<const T*>(r), norm_of<A>(a), true,
                             static_cast<T*>(y),       mask,                      norm_of<A>(b)};
    // Each normalisation as apply's 4 operations, the add, the relu.
    launch_channel_map<T>(g, {x, r, y}, {a.mean, a.invstd, a.gamma, a.beta, b.mean, b.invstd, b.gamma, b.beta}, f,
                          10.0, s);
  });
}

size_t dual_batch_norm_backward_workspace_bytes(const BatchNormGeom& g, DType t) {
  check_geom(g, "dual_batch_norm_backward_relu");
  size_t bytes = 0;
  detail::dispatch_floating(t, "dual_batch_norm_backward_relu", [&](auto z) {
    using A = acc_t<decltype(z)>;
    bytes = 2 * coef_bytes<A>(g.C) +
            detail::channel_partials_bytes<detail::SumState3<A>>(detail::plan_channel_reduce(g.N, g.C, g.S, g.nhwc));
  });
  return bytes;
}

void dual_batch_norm_backward_relu(const BatchNormGeom& g, DType t, const uint8_t* mask, const void* dy,
                                   const void* x, const BatchNormChannels& a, const void* r,
                                   const BatchNormChannels& b, bool training, void* dx, void* dgamma_a,
                                   void* dbeta_a, void* dr, void* dgamma_b, void* dbeta_b, void* workspace,
                                   cudaStream_t s) {
  const char* op = "dual_batch_norm_backward_relu";
  check_geom(g, op);
  RT_CHECK(mask && dy && x && r && a.mean && a.invstd && b.mean && b.invstd && workspace, op, ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    // Workspace: x's dx coefficients, r's, then the reduction's partials.
    A* coef_x = static_cast<A*>(workspace);
    A* coef_r = reinterpret_cast<A*>(static_cast<char*>(workspace) + coef_bytes<A>(g.C));
    auto part = reinterpret_cast<detail::SumState3<A>*>(static_cast<char*>(workspace) + 2 * coef_bytes<A>(g.C));
    const Norm<A> na = norm_of<A>(a), nb = norm_of<A>(b);
    const A M = A(g.N * g.S);
    const detail::ChannelReducePlan plan = detail::plan_channel_reduce(g.N, g.C, g.S, g.nhwc);
    detail::channel_reduce<T>(
        plan,
        DualBackwardFold<T>{static_cast<const T*>(x), static_cast<const T*>(r), static_cast<const T*>(dy), mask,
                            na.mean, nb.mean},
        DualBackwardCoefs<T, A>{
            BackwardCoefs<T, A>{na.invstd, na.gamma, training, M, static_cast<A*>(dgamma_a), static_cast<A*>(dbeta_a),
                                coef_x, g.C, nullptr},
            BackwardCoefs<T, A>{nb.invstd, nb.gamma, training, M, static_cast<A*>(dgamma_b), static_cast<A*>(dbeta_b),
                                coef_r, g.C, nullptr}},
        part, s);
    if (!dx && !dr) return;
    const DualDxOp<T> f{
        DxOp<T>{static_cast<const T*>(x), static_cast<const T*>(dy), ReluKeep{mask}, na.mean, coef_x, g.C,
                static_cast<T*>(dx)},
        DxOp<T>{static_cast<const T*>(r), static_cast<const T*>(dy), ReluKeep{mask}, nb.mean, coef_r, g.C,
                static_cast<T*>(dr)}};
    // dz, then DxOp's 5 operations for each.
    launch_channel_map<T>(g, {x, r, dy, dx, dr}, {coef_x, coef_x + g.C, na.mean, coef_r, coef_r + g.C, nb.mean}, f,
                          11.0, s);
  });
}

void batch_norm_local_moments(const BatchNormGeom& g, DType t, const void* x, double* block, void* workspace,
                              cudaStream_t s) {
  check_geom(g, "batch_norm_local_moments");
  RT_CHECK(x && block && workspace, "batch_norm_local_moments: null pointer");
  detail::dispatch_floating(t, "batch_norm_local_moments", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const detail::ChannelReducePlan plan = detail::plan_channel_reduce(g.N, g.C, g.S, g.nhwc);
    detail::channel_reduce<T>(plan, StatsFold<T>{static_cast<const T*>(x)},
                              WriteMoments<A>{block, g.C, double(g.N * g.S)},
                              static_cast<detail::WelfordState<A>*>(workspace), s);
  });
}

void batch_norm_merge_moments(int64_t C, DType t, int k, const double* blocks, double eps, void* mean, void* invstd,
                              double* count, DType rt, void* running_mean, void* running_var, double momentum,
                              cudaStream_t s) {
  RT_CHECK(C >= 1 && k >= 1, "batch_norm_merge_moments: bad channel count ", C, " or process count ", k);
  RT_CHECK(blocks && mean && invstd && count, "batch_norm_merge_moments: null pointer");
  RT_CHECK((running_mean == nullptr) == (running_var == nullptr),
           "batch_norm_merge_moments: running_mean and running_var go together");
  with_write_stats(t, rt, mean, invstd, eps, running_mean, running_var, momentum, "batch_norm_merge_moments",
                   [&](auto out) {
                     using Out = decltype(out);
                     RT_LAUNCH(detail::grid_for(C, kThreads), kThreads, 0, s,
                               merge_moments_kernel<typename Out::Acc, typename Out::Running>)(C, k, blocks, count,
                                                                                               out);
                     CUDA_CHECK_LAUNCH();
                   });
}

void batch_norm_backward_sums(const BatchNormGeom& g, DType t, const void* x, const uint8_t* mask, const void* dy,
                              const void* mean, const void* invstd, void* dgamma, void* dbeta, void* dresidual,
                              double* sums, void* workspace, cudaStream_t s) {
  const char* op = "batch_norm_backward_sums";
  check_geom(g, op);
  RT_CHECK(x && dy && mean && invstd && sums && workspace, op, ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    backward_reduce<T>(g, static_cast<const T*>(x), ReluKeep{mask}, static_cast<const T*>(dy),
                       static_cast<const A*>(mean), static_cast<const A*>(invstd), nullptr, true,
                       static_cast<A*>(dgamma), static_cast<A*>(dbeta), static_cast<T*>(dresidual), sums, workspace,
                       s);
  });
}

void batch_norm_backward_dx_from_sums(const BatchNormGeom& g, DType t, const void* x, const uint8_t* mask,
                                      const void* dy, const void* mean, const void* invstd, const void* gamma, int k,
                                      const double* sums, const double* count, void* dx, void* workspace,
                                      cudaStream_t s) {
  const char* op = "batch_norm_backward_dx_from_sums";
  check_geom(g, op);
  RT_CHECK(k >= 1, op, ": bad process count ", k);
  RT_CHECK(x && dy && mean && invstd && sums && count && dx && workspace, op, ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const BackwardCoefs<T, A> f{static_cast<const A*>(invstd), static_cast<const A*>(gamma), true, A(0), nullptr,
                                nullptr, static_cast<A*>(workspace), g.C, nullptr};
    RT_LAUNCH(detail::grid_for(g.C, kThreads), kThreads, 0, s, sync_coefs_kernel<T, A>)(k, sums, count, f);
    CUDA_CHECK_LAUNCH();
    backward_dx<T>(g, static_cast<const T*>(x), ReluKeep{mask}, static_cast<const T*>(dy), nullptr,
                   static_cast<const A*>(mean), workspace, static_cast<T*>(dx), s);
  });
}

}  // namespace rt::cuda
