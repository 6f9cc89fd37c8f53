// conv2d as GEMM over patch matrices.
//
// NCHW: im2col builds C (K x M), K = Cg*KH*KW rows ordered (c, kh, kw), M = images*HO*WO
//   columns; then  Y_g (Og x M) = W_g (Og x K) * C.  Each row of C is a strided copy of an
//   input row, so building it streams memory.
// NHWC: the patch matrix P (M x K) has columns ordered (kh, kw, c): each (kh, kw) is a
//   contiguous run of Cg channels; then  Y (M x Og, row stride O) = P * W_g^T,  written
//   straight into the output.
// 1x1, stride-1, unpadded convolutions skip the patch matrix: the input already is one.
// Backward reuses the same matrices:  dW_g = dY_g * C^T  (or dY_g^T * P), and the data
// gradient  dC = W_g^T * dY_g  (dP = dY_g * W_g)  is folded back by col2im.
// The batch is processed in tasks of whole images (Note [Conv tasks]).
#include "kernels/cpu/conv2d.h"

#include <cstddef>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/conv2d_onednn.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/scratch.h"

namespace rt::cpu {
namespace {

struct Dims {
  int64_t Cg, Og, K, HOWO;
  bool pointwise;  // 1x1, stride 1, no padding: the input is its own patch matrix
};

Dims dims(const Conv2dGeom& g) {
  Dims d;
  d.Cg = g.C / g.groups;
  d.Og = g.O / g.groups;
  d.K = d.Cg * g.KH * g.KW;
  d.HOWO = g.HO * g.WO;
  d.pointwise = g.KH == 1 && g.KW == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
  return d;
}

// Weight relayout between (O, Cg, KH, KW) and (O, KH, KW, Cg).
template <typename T>
void oihw_to_ohwi(const T* src, T* dst, int64_t O, int64_t Cg, int64_t KH, int64_t KW) {
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t k = 0; k < KH * KW; ++k) dst[(o * KH * KW + k) * Cg + c] = src[(o * Cg + c) * KH * KW + k];
}
template <typename T>
void ohwi_to_oihw(const T* src, T* dst, int64_t O, int64_t Cg, int64_t KH, int64_t KW) {
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t k = 0; k < KH * KW; ++k) dst[(o * Cg + c) * KH * KW + k] = src[(o * KH * KW + k) * Cg + c];
}

// ---- NCHW ---------------------------------------------------------------------------

// Output columns [lo, hi) of a kernel tap at offset `off` (= kw*dw - pw) read inside the
// input row: 0 <= ow*s + off < W. Outside it the tap sees padding.
struct Span {
  int64_t lo, hi;
};
inline Span valid_span(int64_t off, int64_t s, int64_t W, int64_t WO) {
  const int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
  const int64_t hi = W - off <= 0 ? 0 : std::min(WO, (W - off - 1) / s + 1);
  return {std::min(lo, WO), std::max(std::min(lo, WO), hi)};
}

// C (K x nb*HOWO) for images [n0, n0+nb), group grp.
template <typename T>
void im2col_nchw(const Conv2dGeom& g, const Dims& d, const T* x, int64_t n0, int64_t nb, int64_t grp, T* col) {
  const int64_t M = nb * d.HOWO;
  parallel_for(d.K * nb, [&](int64_t r) {
    const int64_t k = r / nb, n = r % nb;
    const int64_t c = k / (g.KH * g.KW), kh = (k / g.KW) % g.KH, kw = k % g.KW;
    const T* plane = x + ((n0 + n) * g.C + grp * d.Cg + c) * g.H * g.W;
    T* out = col + k * M + n * d.HOWO;
    const int64_t off = kw * g.dw - g.pw;
    const Span sp = valid_span(off, g.sw, g.W, g.WO);
    for (int64_t oh = 0; oh < g.HO; ++oh) {
      const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
      T* o = out + oh * g.WO;
      if (ih < 0 || ih >= g.H) {
        std::fill_n(o, g.WO, T(0));
        continue;
      }
      const T* row = plane + ih * g.W + off;
      std::fill_n(o, sp.lo, T(0));
      if (g.sw == 1) {
        std::memcpy(o + sp.lo, row + sp.lo, size_t(sp.hi - sp.lo) * sizeof(T));
      } else {
        for (int64_t ow = sp.lo; ow < sp.hi; ++ow) o[ow] = row[ow * g.sw];
      }
      std::fill_n(o + sp.hi, g.WO - sp.hi, T(0));
    }
  }, d.HOWO);
}

// dx planes of images [n0, n0+nb), group grp <- fold of dC (K x nb*HOWO). One task per
// input plane: no two tasks write the same element.
template <typename T>
void col2im_nchw(const Conv2dGeom& g, const Dims& d, const T* dcol, int64_t n0, int64_t nb, int64_t grp, T* dx) {
  const int64_t M = nb * d.HOWO;
  parallel_for(nb * d.Cg, [&](int64_t r) {
    const int64_t n = r / d.Cg, c = r % d.Cg;
    T* plane = dx + ((n0 + n) * g.C + grp * d.Cg + c) * g.H * g.W;
    std::fill_n(plane, g.H * g.W, T(0));
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const T* src = dcol + ((c * g.KH + kh) * g.KW + kw) * M + n * d.HOWO;
        const int64_t off = kw * g.dw - g.pw;
        const Span sp = valid_span(off, g.sw, g.W, g.WO);
        for (int64_t oh = 0; oh < g.HO; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          T* row = plane + ih * g.W + off;
          const T* s = src + oh * g.WO;
          if (g.sw == 1) {
            for (int64_t ow = sp.lo; ow < sp.hi; ++ow) row[ow] += s[ow];
          } else {
            for (int64_t ow = sp.lo; ow < sp.hi; ++ow) row[ow * g.sw] += s[ow];
          }
        }
      }
  }, g.KH * g.KW * d.HOWO);
}

// ---- NHWC ---------------------------------------------------------------------------

// P (nb*HOWO x K) for images [n0, n0+nb), group grp; columns (kh, kw, c).
template <typename T>
void im2col_nhwc(const Conv2dGeom& g, const Dims& d, const T* x, int64_t n0, int64_t nb, int64_t grp, T* P) {
  parallel_for(nb * g.HO, [&](int64_t r) {
    const int64_t n = r / g.HO, oh = r % g.HO;
    const T* img = x + (n0 + n) * g.H * g.W * g.C + grp * d.Cg;
    for (int64_t ow = 0; ow < g.WO; ++ow) {
      T* row = P + ((n * g.HO + oh) * g.WO + ow) * d.K;
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
          T* dst = row + (kh * g.KW + kw) * d.Cg;
          // Plain loops, not memcpy/fill_n: a tap is a few dozen channels and the calls
          // cost more than the copies.
          if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) {
            for (int64_t c = 0; c < d.Cg; ++c) dst[c] = T(0);
          } else {
            const T* src = img + (ih * g.W + iw) * g.C;
            for (int64_t c = 0; c < d.Cg; ++c) dst[c] = src[c];
          }
        }
      }
    }
  }, g.WO * d.K);
}

// dx of images [n0, n0+nb), group grp <- fold of dP (nb*HOWO x K).
template <typename T>
void col2im_nhwc(const Conv2dGeom& g, const Dims& d, const T* dP, int64_t n0, int64_t nb, int64_t grp, T* dx) {
  parallel_for(nb * g.H, [&](int64_t r) {
    const int64_t n = r / g.H, ih = r % g.H;
    T* img = dx + (n0 + n) * g.H * g.W * g.C + grp * d.Cg;
    for (int64_t iw = 0; iw < g.W; ++iw) {
      T* out = img + (ih * g.W + iw) * g.C;
      std::fill_n(out, d.Cg, T(0));
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        const int64_t th = ih + g.ph - kh * g.dh;  // = oh * sh when this tap reaches ih
        if (th < 0 || th % g.sh) continue;
        const int64_t oh = th / g.sh;
        if (oh >= g.HO) continue;
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const int64_t tw = iw + g.pw - kw * g.dw;
          if (tw < 0 || tw % g.sw) continue;
          const int64_t ow = tw / g.sw;
          if (ow >= g.WO) continue;
          const T* src = dP + ((n * g.HO + oh) * g.WO + ow) * d.K + (kh * g.KW + kw) * d.Cg;
          for (int64_t c = 0; c < d.Cg; ++c) out[c] += src[c];
        }
      }
    }
  }, g.W * g.KH * g.KW * d.Cg);
}

// ---- tasks ----------------------------------------------------------------------------
//
// Note [Conv tasks]
// The batch is cut into tasks of whole images, as many per task as keep a task's patch
// matrix near kTileBytes (so it stays in cache between im2col, GEMM and col2im), and tasks
// run in parallel with single-threaded GEMMs (Eigen runs serially inside a parallel
// region). Independent tasks need no synchronisation, which beats splitting each small GEMM
// over threads, and small-channel layers stop being bound by memory traffic through a
// batch-sized patch matrix. Only a single task (one large image) runs its GEMMs
// multi-threaded. Each thread sums its weight gradients in its own buffer; the buffers are
// added in thread order (deterministic for a thread count).
constexpr int64_t kTileBytes = 512 << 10;

struct Tasks {
  int64_t per_task, count;
};

Tasks plan_tasks(const Conv2dGeom& g, const Dims& d, size_t elem) {
  const int64_t per_image = std::max<int64_t>(d.K * d.HOWO * int64_t(elem), 1);
  const int64_t per = std::clamp<int64_t>(kTileBytes / per_image, 1, g.N);
  return {per, (g.N + per - 1) / per};
}

// Runs body(n0, nb, thread) for every task, in parallel when there are several.
template <typename F>
void run_tasks(const Conv2dGeom& g, const Tasks& t, int nt, F&& body) {
  if (t.count == 1) {
    body(int64_t(0), g.N, 0);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t k = 0; k < t.count; ++k) {
    const int64_t n0 = k * t.per_task;
    body(n0, std::min(t.per_task, g.N - n0), omp_get_thread_num());
  }
}

// P (M x K, row stride *ld) for images [n0, n0+nb), group grp: the input itself when
// pointwise, else im2col into this thread's scratch.
template <typename T>
const T* patches_nhwc(const Conv2dGeom& g, const Dims& d, const T* x, int64_t n0, int64_t nb, int64_t grp,
                      int64_t* ld) {
  if (d.pointwise) {
    *ld = g.C;
    return x + n0 * d.HOWO * g.C + grp * d.Cg;
  }
  T* buf = scratch<T>(0, size_t(nb * d.HOWO * d.K));
  im2col_nhwc(g, d, x, n0, nb, grp, buf);
  *ld = d.K;
  return buf;
}

template <typename T>
void forward_tasks(const Conv2dGeom& g, const Dims& d, const T* x, const T* w, T* y) {
  const Tasks t = plan_tasks(g, d, sizeof(T));
  run_tasks(g, t, omp_get_max_threads(), [&](int64_t n0, int64_t nb, int) {
    const int64_t M = nb * d.HOWO;
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* Wg = w + grp * d.Og * d.K;
      if (g.nhwc) {
        // Y (M x Og, row stride O) = P (M x K) * W_g^T
        int64_t ldp;
        const T* P = patches_nhwc(g, d, x, n0, nb, grp, &ldp);
        gemm<T>(false, true, M, d.Og, d.K, P, ldp, Wg, d.K, false, y + n0 * d.HOWO * g.O + grp * d.Og, g.O);
        continue;
      }
      // Y_g (Og x M) = W_g * C (K x M); straight into y for one image, else scattered.
      const T* C = x + (n0 * g.C + grp * d.Cg) * d.HOWO;
      if (!(d.pointwise && nb == 1)) {
        T* col = scratch<T>(0, size_t(d.K * M));
        im2col_nchw(g, d, x, n0, nb, grp, col);
        C = col;
      }
      if (nb == 1) {
        gemm<T>(false, false, d.Og, M, d.K, Wg, d.K, C, M, false, y + (n0 * g.O + grp * d.Og) * d.HOWO, M);
        continue;
      }
      T* out = scratch<T>(1, size_t(d.Og * M));
      gemm<T>(false, false, d.Og, M, d.K, Wg, d.K, C, M, false, out, M);
      parallel_for(nb * d.Og, [&](int64_t r) {
        const int64_t n = r / d.Og, o = r % d.Og;
        std::memcpy(y + ((n0 + n) * g.O + grp * d.Og + o) * d.HOWO, out + o * M + n * d.HOWO,
                    size_t(d.HOWO) * sizeof(T));
      }, d.HOWO);
    }
  });
}

template <typename T>
void backward_tasks(const Conv2dGeom& g, const Dims& d, const T* x, const T* w, const T* dy, T* dx, T* dw) {
  const Tasks t = plan_tasks(g, d, sizeof(T));
  const int nt = t.count == 1 ? 1 : omp_get_max_threads();
  const size_t wsize = size_t(g.O * d.K);
  T* partial = dw ? scratch<T>(3, wsize * size_t(nt)) : nullptr;
  std::vector<char> used(size_t(nt), 0);
  run_tasks(g, t, nt, [&](int64_t n0, int64_t nb, int th) {
    const int64_t M = nb * d.HOWO;
    T* acc = dw ? partial + wsize * size_t(th) : nullptr;
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* Wg = w + grp * d.Og * d.K;
      T* accg = dw ? acc + grp * d.Og * d.K : nullptr;
      if (g.nhwc) {
        const T* dYg = dy + n0 * d.HOWO * g.O + grp * d.Og;  // M x Og, row stride O
        if (dw) {
          int64_t ldp;
          const T* P = patches_nhwc(g, d, x, n0, nb, grp, &ldp);
          gemm<T>(true, false, d.Og, d.K, M, dYg, g.O, P, ldp, used[th] != 0, accg, d.K);
        }
        if (dx) {
          if (d.pointwise) {
            gemm<T>(false, false, M, d.K, d.Og, dYg, g.O, Wg, d.K, false, dx + n0 * d.HOWO * g.C + grp * d.Cg, g.C);
          } else {
            T* dP = scratch<T>(2, size_t(M * d.K));
            gemm<T>(false, false, M, d.K, d.Og, dYg, g.O, Wg, d.K, false, dP, d.K);
            col2im_nhwc(g, d, dP, n0, nb, grp, dx);
          }
        }
        continue;
      }
      // NCHW: dY_g (Og x M), direct for one image, else gathered.
      const T* DY = dy + (n0 * g.O + grp * d.Og) * d.HOWO;
      if (nb > 1) {
        T* dyg = scratch<T>(1, size_t(d.Og * M));
        parallel_for(nb * d.Og, [&](int64_t r) {
          const int64_t n = r / d.Og, o = r % d.Og;
          std::memcpy(dyg + o * M + n * d.HOWO, dy + ((n0 + n) * g.O + grp * d.Og + o) * d.HOWO,
                      size_t(d.HOWO) * sizeof(T));
        }, d.HOWO);
        DY = dyg;
      }
      const bool direct = d.pointwise && nb == 1;
      if (dw) {
        const T* C = x + (n0 * g.C + grp * d.Cg) * d.HOWO;
        if (!direct) {
          T* col = scratch<T>(0, size_t(d.K * M));
          im2col_nchw(g, d, x, n0, nb, grp, col);
          C = col;
        }
        gemm<T>(false, true, d.Og, d.K, M, DY, M, C, M, used[th] != 0, accg, d.K);
      }
      if (dx) {
        if (direct) {
          gemm<T>(true, false, d.K, M, d.Og, Wg, d.K, DY, M, false, dx + (n0 * g.C + grp * d.Cg) * d.HOWO, M);
        } else {
          T* dcol = scratch<T>(2, size_t(d.K * M));
          gemm<T>(true, false, d.K, M, d.Og, Wg, d.K, DY, M, false, dcol, M);
          col2im_nchw(g, d, dcol, n0, nb, grp, dx);
        }
      }
    }
    used[th] = 1;
  });
  if (!dw) return;
  bool first = true;
  for (int th = 0; th < nt; ++th) {
    if (!used[th]) continue;
    const T* src = partial + wsize * size_t(th);
    if (first) std::memcpy(dw, src, wsize * sizeof(T));
    else
      for (size_t i = 0; i < wsize; ++i) dw[i] += src[i];
    first = false;
  }
}

}  // namespace

template <typename T>
void conv2d_bias_grad(const Conv2dGeom& g, const T* dy, T* db) {
  const Dims d = dims(g);
  std::vector<double> acc(size_t(g.O), 0.0);
  if (g.nhwc) {
    for (int64_t r = 0; r < g.N * d.HOWO; ++r)
      for (int64_t o = 0; o < g.O; ++o) acc[o] += dy[r * g.O + o];
  } else {
    parallel_for(g.O, [&](int64_t o) {
      double s = 0;
      for (int64_t n = 0; n < g.N; ++n) {
        const T* plane = dy + (n * g.O + o) * d.HOWO;
        for (int64_t i = 0; i < d.HOWO; ++i) s += plane[i];
      }
      acc[o] = s;
    }, g.N * d.HOWO);
  }
  for (int64_t o = 0; o < g.O; ++o) db[o] = T(acc[o]);
}

template <typename T>
void im2col_conv2d_forward(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y) {
  const Dims d = dims(g);
  // The GEMMs want the weight's K axis in the patch matrix's order.
  std::vector<T> wt;
  const bool relayout = g.nhwc != g.weight_ohwi && g.KH * g.KW > 1;
  if (relayout) {
    wt.resize(size_t(g.O * d.K));
    if (g.nhwc) oihw_to_ohwi(w, wt.data(), g.O, d.Cg, g.KH, g.KW);
    else ohwi_to_oihw(w, wt.data(), g.O, d.Cg, g.KH, g.KW);
    w = wt.data();
  }
  forward_tasks(g, d, x, w, y);
  if (!bias) return;
  if (g.nhwc) {
    parallel_for(g.N * d.HOWO, [&](int64_t r) {
      T* row = y + r * g.O;
      for (int64_t o = 0; o < g.O; ++o) row[o] += bias[o];
    }, g.O);
  } else {
    parallel_for(g.N * g.O, [&](int64_t r) {
      T* plane = y + r * d.HOWO;
      const T b = bias[r % g.O];
      for (int64_t i = 0; i < d.HOWO; ++i) plane[i] += b;
    }, d.HOWO);
  }
}

template <typename T>
void im2col_conv2d_backward(const Conv2dGeom& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db) {
  const Dims d = dims(g);
  const bool relayout = g.nhwc != g.weight_ohwi && g.KH * g.KW > 1;
  std::vector<T> wt, dwt;
  if (relayout) {
    wt.resize(size_t(g.O * d.K));
    if (g.nhwc) oihw_to_ohwi(w, wt.data(), g.O, d.Cg, g.KH, g.KW);
    else ohwi_to_oihw(w, wt.data(), g.O, d.Cg, g.KH, g.KW);
    w = wt.data();
  }
  T* dw_work = dw;
  if (dw && relayout) {
    dwt.resize(size_t(g.O * d.K));
    dw_work = dwt.data();
  }
  if (dx || dw) {
    backward_tasks(g, d, x, w, dy, dx, dw_work);
  }
  if (dw && relayout) {
    if (g.nhwc) ohwi_to_oihw(dw_work, dw, g.O, d.Cg, g.KH, g.KW);
    else oihw_to_ohwi(dw_work, dw, g.O, d.Cg, g.KH, g.KW);
  }
  if (db) conv2d_bias_grad(g, dy, db);
}

template <typename T>
void conv2d_forward(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y) {
  if constexpr (std::is_same_v<T, float>)
    if (conv_algo() == ConvAlgo::onednn && onednn_conv2d_forward(g, x, w, bias, y)) return;
  im2col_conv2d_forward(g, x, w, bias, y);
}

template <typename T>
void conv2d_backward(const Conv2dGeom& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db) {
  if constexpr (std::is_same_v<T, float>)
    if (conv_algo() == ConvAlgo::onednn && onednn_conv2d_backward(g, x, w, dy, dx, dw, db)) return;
  im2col_conv2d_backward(g, x, w, dy, dx, dw, db);
}

#define RT_CONV2D_INSTANTIATE(name, T) \
  template void name##_forward<T>(const Conv2dGeom&, const T*, const T*, const T*, T*); \
  template void name##_backward<T>(const Conv2dGeom&, const T*, const T*, const T*, T*, T*, T*);
RT_CONV2D_INSTANTIATE(conv2d, float)
RT_CONV2D_INSTANTIATE(conv2d, double)
RT_CONV2D_INSTANTIATE(im2col_conv2d, float)
RT_CONV2D_INSTANTIATE(im2col_conv2d, double)
template void conv2d_bias_grad<float>(const Conv2dGeom&, const float*, float*);
template void conv2d_bias_grad<double>(const Conv2dGeom&, const double*, double*);
#undef RT_CONV2D_INSTANTIATE

}  // namespace rt::cpu
