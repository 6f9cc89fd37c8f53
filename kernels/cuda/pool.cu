// Pooling: max_pool2d forward/backward and adaptive average pooling forward/backward.
//
// Kernels first, then launchers. One thread per output element (forward) or per input pixel
// (backward), grid-stride over the tensor in its memory order, so stores are coalesced in
// both layouts. Both backwards are gathers: each input pixel sums the output cells that
// reach it, in the order the CPU scatters them (output rows, then columns), so no atomics
// and the same bits on every run. The global pool (HO = WO = 1) has its own forward: one
// warp per plane for NCHW (a plane is contiguous), one thread per (n, c) for NHWC (threads
// of a warp read neighbouring channels).
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/pool.h"

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::from_acc;
using detail::to_acc;

constexpr int kThreads = 256;

// ---- indexing --------------------------------------------------------------------------
// Element (n, c, h, w) of an (N, C, H, W) tensor: NCHW offset ((n*C + c)*H + h)*W + w, NHWC
// ((n*H + h)*W + w)*C + c; both are plane_base(n, c) + (h*W + w) * pixel_stride.

struct Coord {
  int64_t n, c, h, w;
};

__device__ __forceinline__ Coord decode(int64_t i, int64_t C, int64_t H, int64_t W, bool nhwc) {
  Coord r;
  if (nhwc) {
    r.c = i % C; i /= C;
    r.w = i % W; i /= W;
    r.h = i % H; r.n = i / H;
  } else {
    r.w = i % W; i /= W;
    r.h = i % H; i /= H;
    r.c = i % C; r.n = i / C;
  }
  return r;
}

__device__ __forceinline__ int64_t plane_base(int64_t n, int64_t c, int64_t C, int64_t H, int64_t W, bool nhwc) {
  return nhwc ? n * H * W * C + c : (n * C + c) * H * W;
}

// Adaptive windows: cell i of `out` covers [start, end) of `in`.
__device__ __forceinline__ int64_t start_index(int64_t i, int64_t out, int64_t in) { return (i * in) / out; }
__device__ __forceinline__ int64_t end_index(int64_t i, int64_t out, int64_t in) { return ((i + 1) * in + out - 1) / out; }

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void max_pool_forward_kernel(Pool2dGeom g, const T* __restrict__ x, T* __restrict__ y,
                                        int64_t* __restrict__ idx) {
  using A = acc_t<T>;
  const int64_t total = g.N * g.C * g.HO * g.WO, xs = g.nhwc ? g.C : 1;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    const Coord q = decode(o, g.C, g.HO, g.WO, g.nhwc);
    const T* xp = x + plane_base(q.n, q.c, g.C, g.H, g.W, g.nhwc);
    A best = A(-INFINITY);
    int64_t arg = -1;
    bool nan = false;
    for (int64_t i = 0; i < g.kh && !nan; ++i) {
      const int64_t ih = q.h * g.sh - g.ph + i * g.dh;
      if (ih < 0 || ih >= g.H) continue;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t iw = q.w * g.sw - g.pw + j * g.dw;
        if (iw < 0 || iw >= g.W) continue;
        const A v = to_acc(xp[(ih * g.W + iw) * xs]);
        if (v > best || isnan(v) || arg < 0) {
          best = v;
          arg = ih * g.W + iw;
          if (isnan(v)) { nan = true; break; }  // the first NaN wins, like the CPU
        }
      }
    }
    y[o] = from_acc<T>(best);  // exact: best is a widened input value (or -inf)
    idx[o] = arg;
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(Pool2dGeom g, const T* __restrict__ dy, const int64_t* __restrict__ idx,
                                         T* __restrict__ dx) {
  using A = acc_t<T>;
  const int64_t total = g.N * g.C * g.H * g.W, os = g.nhwc ? g.C : 1;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < total; p += int64_t(gridDim.x) * blockDim.x) {
    const Coord q = decode(p, g.C, g.H, g.W, g.nhwc);
    const int64_t ob = plane_base(q.n, q.c, g.C, g.HO, g.WO, g.nhwc), me = q.h * g.W + q.w;
    A s = 0;
    // Window row oh reaches row q.h through tap i when oh*sh - ph + i*dh == q.h; walking i
    // down walks oh up (the CPU's order).
    for (int64_t i = g.kh - 1; i >= 0; --i) {
      const int64_t th = q.h + g.ph - i * g.dh;
      if (th < 0 || th % g.sh != 0 || th / g.sh >= g.HO) continue;
      const int64_t oh = th / g.sh;
      for (int64_t j = g.kw - 1; j >= 0; --j) {
        const int64_t tw = q.w + g.pw - j * g.dw;
        if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.WO) continue;
        const int64_t k = ob + (oh * g.WO + tw / g.sw) * os;
        if (idx[k] == me) s += to_acc(dy[k]);
      }
    }
    dx[p] = from_acc<T>(s);
  }
}

template <typename T>
__global__ void avg_pool_forward_kernel(Pool2dGeom g, const T* __restrict__ x, T* __restrict__ y) {
  using A = acc_t<T>;
  const int64_t total = g.N * g.C * g.HO * g.WO, xs = g.nhwc ? g.C : 1;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    const Coord q = decode(o, g.C, g.HO, g.WO, g.nhwc);
    const T* xp = x + plane_base(q.n, q.c, g.C, g.H, g.W, g.nhwc);
    const int64_t h0 = start_index(q.h, g.HO, g.H), h1 = end_index(q.h, g.HO, g.H);
    const int64_t w0 = start_index(q.w, g.WO, g.W), w1 = end_index(q.w, g.WO, g.W);
    A s = 0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) s += to_acc(xp[(h * g.W + w) * xs]);
    y[o] = from_acc<T>(s / A((h1 - h0) * (w1 - w0)));
  }
}

// Global pool, NCHW: one warp per contiguous plane, lanes stride through it, then a
// butterfly over the warp (fixed order: deterministic).
template <typename T>
__global__ void global_avg_nchw_kernel(int64_t planes, int64_t S, const T* __restrict__ x, T* __restrict__ y) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; r < planes; r += warps) {
    const T* xp = x + r * S;
    A s = 0;
    for (int64_t i = lane; i < S; i += 32) s += to_acc(xp[i]);
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) y[r] = from_acc<T>(s / A(S));
  }
}

// Global pool, NHWC: one thread per (n, c), walking the pixels in order.
template <typename T>
__global__ void global_avg_nhwc_kernel(int64_t N, int64_t C, int64_t S, const T* __restrict__ x, T* __restrict__ y) {
  using A = acc_t<T>;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < N * C; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = o / C, c = o % C;
    const T* xp = x + n * S * C + c;
    A s = 0;
    for (int64_t i = 0; i < S; ++i) s += to_acc(xp[i * C]);
    y[o] = from_acc<T>(s / A(S));
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(Pool2dGeom g, const T* __restrict__ dy, T* __restrict__ dx) {
  using A = acc_t<T>;
  const int64_t total = g.N * g.C * g.H * g.W, os = g.nhwc ? g.C : 1;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < total; p += int64_t(gridDim.x) * blockDim.x) {
    const Coord q = decode(p, g.C, g.H, g.W, g.nhwc);
    const int64_t ob = plane_base(q.n, q.c, g.C, g.HO, g.WO, g.nhwc);
    // The cells whose window holds row q.h: [start_index(h, H, HO), end_index(h, H, HO)),
    // re-checked against the window bounds.
    const int64_t oh0 = start_index(q.h, g.H, g.HO), oh1 = end_index(q.h, g.H, g.HO);
    const int64_t ow0 = start_index(q.w, g.W, g.WO), ow1 = end_index(q.w, g.W, g.WO);
    A s = 0;
    for (int64_t oh = oh0; oh < oh1 && oh < g.HO; ++oh) {
      const int64_t h0 = start_index(oh, g.HO, g.H), h1 = end_index(oh, g.HO, g.H);
      if (q.h < h0 || q.h >= h1) continue;
      for (int64_t ow = ow0; ow < ow1 && ow < g.WO; ++ow) {
        const int64_t w0 = start_index(ow, g.WO, g.W), w1 = end_index(ow, g.WO, g.W);
        if (q.w < w0 || q.w >= w1) continue;
        s += to_acc(dy[ob + (oh * g.WO + ow) * os]) / A((h1 - h0) * (w1 - w0));
      }
    }
    dx[p] = from_acc<T>(s);
  }
}

// ---- launchers -------------------------------------------------------------------------

void check_geom(const Pool2dGeom& g, bool max_pool, const char* op) {
  RT_CHECK(g.N >= 0 && g.C >= 0 && g.H > 0 && g.W > 0 && g.HO > 0 && g.WO > 0, op, ": bad geometry N=", g.N,
           " C=", g.C, " H=", g.H, " W=", g.W, " HO=", g.HO, " WO=", g.WO);
  if (max_pool)
    RT_CHECK(g.kh > 0 && g.kw > 0 && g.sh > 0 && g.sw > 0 && g.dh > 0 && g.dw > 0 && g.ph >= 0 && g.pw >= 0, op,
             ": kernel, stride and dilation must be positive and padding non-negative");
}

}  // namespace

void max_pool2d_forward(const Pool2dGeom& g, DType t, const void* x, void* y, int64_t* idx, cudaStream_t s) {
  const char* op = "max_pool2d_forward";
  check_geom(g, true, op);
  const int64_t total = g.N * g.C * g.HO * g.WO;
  if (total == 0) return;
  RT_CHECK(x != nullptr && y != nullptr && idx != nullptr, op, ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    RT_LAUNCH(detail::grid_for(total, kThreads), kThreads, 0, s, max_pool_forward_kernel<T>)(
        g, static_cast<const T*>(x), static_cast<T*>(y), idx);
    CUDA_CHECK_LAUNCH();
  });
}

void max_pool2d_backward(const Pool2dGeom& g, DType t, const void* dy, const int64_t* idx, void* dx, cudaStream_t s) {
  const char* op = "max_pool2d_backward";
  check_geom(g, true, op);
  const int64_t total = g.N * g.C * g.H * g.W;
  if (total == 0) return;
  RT_CHECK(dy != nullptr && idx != nullptr && dx != nullptr, op, ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    RT_LAUNCH(detail::grid_for(total, kThreads), kThreads, 0, s, max_pool_backward_kernel<T>)(
        g, static_cast<const T*>(dy), idx, static_cast<T*>(dx));
    CUDA_CHECK_LAUNCH();
  });
}

void adaptive_avg_pool2d_forward(const Pool2dGeom& g, DType t, const void* x, void* y, cudaStream_t s) {
  const char* op = "adaptive_avg_pool2d_forward";
  check_geom(g, false, op);
  const int64_t total = g.N * g.C * g.HO * g.WO;
  if (total == 0) return;
  RT_CHECK(x != nullptr && y != nullptr, op, ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    auto xp = static_cast<const T*>(x);
    auto yp = static_cast<T*>(y);
    const int64_t S = g.H * g.W;
    if (g.HO == 1 && g.WO == 1 && !g.nhwc) {
      const int64_t planes = g.N * g.C;
      RT_LAUNCH(detail::grid_for(planes * 32, kThreads), kThreads, 0, s, global_avg_nchw_kernel<T>)(planes, S, xp, yp);
    } else if (g.HO == 1 && g.WO == 1) {
      RT_LAUNCH(detail::grid_for(total, kThreads), kThreads, 0, s, global_avg_nhwc_kernel<T>)(g.N, g.C, S, xp, yp);
    } else {
      RT_LAUNCH(detail::grid_for(total, kThreads), kThreads, 0, s, avg_pool_forward_kernel<T>)(g, xp, yp);
    }
    CUDA_CHECK_LAUNCH();
  });
}

void adaptive_avg_pool2d_backward(const Pool2dGeom& g, DType t, const void* dy, void* dx, cudaStream_t s) {
  const char* op = "adaptive_avg_pool2d_backward";
  check_geom(g, false, op);
  const int64_t total = g.N * g.C * g.H * g.W;
  if (total == 0) return;
  RT_CHECK(dy != nullptr && dx != nullptr, op, ": null pointer");
  detail::dispatch_floating(t, op, [&](auto z) {
    using T = decltype(z);
    RT_LAUNCH(detail::grid_for(total, kThreads), kThreads, 0, s, avg_pool_backward_kernel<T>)(
        g, static_cast<const T*>(dy), static_cast<T*>(dx));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace rt::cuda
