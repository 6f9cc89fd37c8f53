#include "kernels/cpu/pool.h"

#include <cstddef>
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/scratch.h"

namespace rt::cpu {
namespace {

// Element (n, c, h, w): NCHW offset ((n*C + c)*H + h)*W + w; NHWC ((n*H + h)*W + w)*C + c.
// `plane_base(n, c)` and `pixel_stride` turn both into base + (h*W + w) * pixel_stride.
struct Addr {
  int64_t H, W, C;
  bool nhwc;
  int64_t base(int64_t n, int64_t c) const { return nhwc ? n * H * W * C + c : (n * C + c) * H * W; }
  int64_t stride() const { return nhwc ? C : 1; }
};

// One tap of an NHWC max-pool window over C contiguous channels: where x beats the best so
// far (or is NaN, or is the first value), it becomes the best and `a` its index; a NaN best
// stays. Plain pointer arguments and unconditional selects, so the loop vectorises.
template <typename T>
void max_pool_tap(int64_t C, const T* __restrict x, int64_t a, T* __restrict best, int64_t* __restrict arg) {
  for (int64_t c = 0; c < C; ++c) {
    const T v = x[c], b = best[c];
    const int64_t i = arg[c];
    const bool take = b == b && (v > b || v != v || i < 0);  // b != b: a NaN already won
    best[c] = take ? v : b;
    arg[c] = take ? a : i;
  }
}

inline int64_t start_index(int64_t i, int64_t out, int64_t in) { return (i * in) / out; }
inline int64_t end_index(int64_t i, int64_t out, int64_t in) { return ((i + 1) * in + out - 1) / out; }

// The same rule along an NCHW output row: outputs [0, n) of the row read x at a stride of
// `xs` elements; output k's candidate index is a + k * as.
template <typename T>
void max_pool_tap_row(int64_t n, const T* __restrict x, int64_t xs, int64_t a, int64_t as, T* __restrict best,
                      int64_t* __restrict arg) {
  for (int64_t k = 0; k < n; ++k) {
    const T v = x[k * xs], b = best[k];
    const int64_t i = arg[k];
    const bool take = b == b && (v > b || v != v || i < 0);
    best[k] = take ? v : b;
    arg[k] = take ? a + k * as : i;
  }
}

}  // namespace

template <typename T>
void max_pool2d_forward(const Pool2dGeom& g, const T* x, T* y, int64_t* idx) {
  if (g.nhwc) {
    // Channels are contiguous: each output pixel's window is walked once with every channel
    // in the inner, unit-stride loop, instead of once per channel at a stride of C (which
    // made this 9-17x slower than PyTorch's: bench/RESULTS.md, "The profiler"). The rule per
    // channel is the loop's below: the first maximum wins; a NaN wins and nothing replaces it.
    parallel_for(g.N * g.HO, [&](int64_t r) {
      const int64_t n = r / g.HO, oh = r % g.HO, C = g.C;
      for (int64_t ow = 0; ow < g.WO; ++ow) {
        T* yp = y + ((n * g.HO + oh) * g.WO + ow) * C;
        int64_t* ip = idx + ((n * g.HO + oh) * g.WO + ow) * C;
        for (int64_t c = 0; c < C; ++c) {
          yp[c] = -std::numeric_limits<T>::infinity();
          ip[c] = -1;
        }
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t iw = ow * g.sw - g.pw + j * g.dw;
            if (iw < 0 || iw >= g.W) continue;
            max_pool_tap(C, x + ((n * g.H + ih) * g.W + iw) * C, ih * g.W + iw, yp, ip);
          }
        }
      }
    }, g.WO * g.C * g.kh * g.kw);
    return;
  }
  // NCHW: one output row at a time, each tap of the window applied to the whole row (the
  // outputs whose tap lies inside the input) with the rule of max_pool_tap: the same
  // comparisons in the same tap order per output as a walk output by output, vectorised
  // along the row. (Output by output, with a branch per tap, the stem's pool took 34 ms per
  // ResNet-50 batch-8 step.)
  // A strided row is first split into its sw phases (phase p holds x[p], x[p + sw], ...)
  // in the thread's scratch, so that every tap reads unit-stride.
  const int64_t phase_len = (g.W + g.sw - 1) / g.sw;
  parallel_for(g.N * g.C * g.HO, [&](int64_t r) {
    const int64_t plane = r / g.HO, oh = r % g.HO;
    const T* xp = x + plane * g.H * g.W;
    T* yp = y + r * g.WO;
    int64_t* ip = idx + r * g.WO;
    T* phases = g.sw > 1 ? scratch<T>(0, size_t(g.sw * phase_len)) : nullptr;
    for (int64_t k = 0; k < g.WO; ++k) {
      yp[k] = -std::numeric_limits<T>::infinity();
      ip[k] = -1;
    }
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t ih = oh * g.sh - g.ph + i * g.dh;
      if (ih < 0 || ih >= g.H) continue;
      const T* row = xp + ih * g.W;
      if (phases)
        for (int64_t q = 0; q < g.sw; ++q)
          for (int64_t k = 0; q + k * g.sw < g.W; ++k) phases[q * phase_len + k] = row[q + k * g.sw];
      for (int64_t j = 0; j < g.kw; ++j) {
        // Outputs ow with 0 <= ow*sw - pw + j*dw < W.
        const int64_t off = j * g.dw - g.pw;
        const int64_t lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
        const int64_t hi = std::min(g.WO, off >= g.W ? 0 : (g.W - 1 - off) / g.sw + 1);
        if (lo >= hi) continue;
        const int64_t iw = lo * g.sw + off;  // input column of output lo; then every sw
        const T* src = phases ? phases + (iw % g.sw) * phase_len + iw / g.sw : row + iw;
        max_pool_tap_row(hi - lo, src, int64_t(1), ih * g.W + iw, g.sw, yp + lo, ip + lo);
      }
    }
  }, g.WO * g.kh * g.kw);
}

template <typename T>
void max_pool2d_backward(const Pool2dGeom& g, const T* dy, const int64_t* idx, T* dx) {
  if (g.nhwc) {
    // As the forward: channels innermost. Per element the same additions in the same order
    // (output pixels ascending) as the loop below.
    parallel_for(g.N, [&](int64_t n) {
      const int64_t C = g.C;
      T* xb = dx + n * g.H * g.W * C;
      std::fill(xb, xb + g.H * g.W * C, T(0));
      const T* db = dy + n * g.HO * g.WO * C;
      const int64_t* ib = idx + n * g.HO * g.WO * C;
      for (int64_t k = 0; k < g.HO * g.WO; ++k)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t a = ib[k * C + c];
          if (a >= 0) xb[a * C + c] += db[k * C + c];
        }
    }, g.C * (g.H * g.W + g.HO * g.WO));
    return;
  }
  const Addr in{g.H, g.W, g.C, g.nhwc}, out{g.HO, g.WO, g.C, g.nhwc};
  // One image per task: the windows of one image only scatter into that image.
  parallel_for(g.N, [&](int64_t n) {
    for (int64_t c = 0; c < g.C; ++c) {
      T* xp = dx + in.base(n, c);
      for (int64_t i = 0; i < g.H * g.W; ++i) xp[i * in.stride()] = T(0);
    }
    for (int64_t c = 0; c < g.C; ++c) {
      T* xp = dx + in.base(n, c);
      const int64_t ob = out.base(n, c), os = out.stride();
      for (int64_t k = 0; k < g.HO * g.WO; ++k) {
        const int64_t a = idx[ob + k * os];
        if (a >= 0) xp[a * in.stride()] += dy[ob + k * os];
      }
    }
  }, g.C * (g.H * g.W + g.HO * g.WO));
}

// Note [Channels-last average pooling]
// In NHWC a channel's values lie C elements apart; a loop per channel walks them with a
// stride of C * 4 bytes (8 KiB for ResNet-50's 2048 channels: every access a new cache
// line, all in one L1 set), which made the global pool's backward 11 ms for an 8x2048x7x7
// input. The NHWC loops below walk pixels with the channels innermost instead, adding in
// the same order per element (same results, bit for bit).
template <typename T>
void adaptive_avg_pool2d_forward_nhwc(const Pool2dGeom& g, const T* x, T* y) {
  parallel_for(g.N * g.HO, [&](int64_t r) {
    const int64_t n = r / g.HO, oh = r % g.HO;
    const int64_t h0 = start_index(oh, g.HO, g.H), h1 = end_index(oh, g.HO, g.H);
    for (int64_t ow = 0; ow < g.WO; ++ow) {
      const int64_t w0 = start_index(ow, g.WO, g.W), w1 = end_index(ow, g.WO, g.W);
      T* __restrict yp = y + ((n * g.HO + oh) * g.WO + ow) * g.C;
      for (int64_t c = 0; c < g.C; ++c) yp[c] = T(0);
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) {
          const T* __restrict xp = x + ((n * g.H + h) * g.W + w) * g.C;
          for (int64_t c = 0; c < g.C; ++c) yp[c] += xp[c];
        }
      const T area = T((h1 - h0) * (w1 - w0));
      for (int64_t c = 0; c < g.C; ++c) yp[c] /= area;
    }
  }, g.H * g.W * g.C / std::max<int64_t>(1, g.HO));
}

// Each image's dx is its own: parallel over the batch, output cells in order within one.
template <typename T>
void adaptive_avg_pool2d_backward_nhwc(const Pool2dGeom& g, const T* dy, T* dx) {
  parallel_for(g.N, [&](int64_t n) {
    T* __restrict xn = dx + n * g.H * g.W * g.C;
    for (int64_t i = 0; i < g.H * g.W * g.C; ++i) xn[i] = T(0);
    for (int64_t oh = 0; oh < g.HO; ++oh) {
      const int64_t h0 = start_index(oh, g.HO, g.H), h1 = end_index(oh, g.HO, g.H);
      for (int64_t ow = 0; ow < g.WO; ++ow) {
        const int64_t w0 = start_index(ow, g.WO, g.W), w1 = end_index(ow, g.WO, g.W);
        const T area = T((h1 - h0) * (w1 - w0));
        const T* __restrict dp = dy + ((n * g.HO + oh) * g.WO + ow) * g.C;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) {
            T* __restrict xp = xn + (h * g.W + w) * g.C;
            for (int64_t c = 0; c < g.C; ++c) xp[c] += dp[c] / area;
          }
      }
    }
  }, g.H * g.W * g.C);
}

template <typename T>
void adaptive_avg_pool2d_forward(const Pool2dGeom& g, const T* x, T* y) {
  if (g.nhwc) return adaptive_avg_pool2d_forward_nhwc(g, x, y);  // Note [Channels-last average pooling]
  const Addr in{g.H, g.W, g.C, g.nhwc}, out{g.HO, g.WO, g.C, g.nhwc};
  parallel_for(g.N * g.C, [&](int64_t r) {
    const int64_t n = r / g.C, c = r % g.C;
    const T* xp = x + in.base(n, c);
    for (int64_t oh = 0; oh < g.HO; ++oh) {
      const int64_t h0 = start_index(oh, g.HO, g.H), h1 = end_index(oh, g.HO, g.H);
      for (int64_t ow = 0; ow < g.WO; ++ow) {
        const int64_t w0 = start_index(ow, g.WO, g.W), w1 = end_index(ow, g.WO, g.W);
        T s = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) s += xp[(h * g.W + w) * in.stride()];
        y[out.base(n, c) + (oh * g.WO + ow) * out.stride()] = s / T((h1 - h0) * (w1 - w0));
      }
    }
  }, g.H * g.W);
}

template <typename T>
void adaptive_avg_pool2d_backward(const Pool2dGeom& g, const T* dy, T* dx) {
  if (g.nhwc) return adaptive_avg_pool2d_backward_nhwc(g, dy, dx);  // Note [Channels-last average pooling]
  const Addr in{g.H, g.W, g.C, g.nhwc}, out{g.HO, g.WO, g.C, g.nhwc};
  parallel_for(g.N * g.C, [&](int64_t r) {
    const int64_t n = r / g.C, c = r % g.C;
    T* xp = dx + in.base(n, c);
    for (int64_t i = 0; i < g.H * g.W; ++i) xp[i * in.stride()] = T(0);
    for (int64_t oh = 0; oh < g.HO; ++oh) {
      const int64_t h0 = start_index(oh, g.HO, g.H), h1 = end_index(oh, g.HO, g.H);
      for (int64_t ow = 0; ow < g.WO; ++ow) {
        const int64_t w0 = start_index(ow, g.WO, g.W), w1 = end_index(ow, g.WO, g.W);
        const T v = dy[out.base(n, c) + (oh * g.WO + ow) * out.stride()] / T((h1 - h0) * (w1 - w0));
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) xp[(h * g.W + w) * in.stride()] += v;
      }
    }
  }, g.H * g.W);
}

#define RT_INSTANTIATE(T)                                                                          \
  template void max_pool2d_forward<T>(const Pool2dGeom&, const T*, T*, int64_t*);                 \
  template void max_pool2d_backward<T>(const Pool2dGeom&, const T*, const int64_t*, T*);          \
  template void adaptive_avg_pool2d_forward<T>(const Pool2dGeom&, const T*, T*);                  \
  template void adaptive_avg_pool2d_backward<T>(const Pool2dGeom&, const T*, T*);
RT_INSTANTIATE(float)
RT_INSTANTIATE(double)
#undef RT_INSTANTIATE

}  // namespace rt::cpu
