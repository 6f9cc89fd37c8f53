// Reductions over a middle dim. inner == 1 (the reduced dims are the innermost in memory):
// one output per row, the row summed with four interleaved accumulators in a fixed order.
// inner > 1: tiles of up to kTile outputs along inner, each tile walking r = 0 .. n-1 over
// contiguous runs of x, with the tile's accumulators in a local array.
#include "kernels/cpu/reduce_dims.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/parallel.h"

namespace rt::cpu {
namespace {

constexpr int64_t kTile = 256;

// Whether value v (at a later r) replaces best: larger, or the first NaN.
template <typename T>
inline bool beats(T v, T best) {
  return v > best || (v != v && best == best);
}

}  // namespace

template <typename T>
void sum_dim(int64_t outer, int64_t n, int64_t inner, const T* x, double scale, T* y) {
  if (inner == 1) {
    parallel_range(
        outer,
        [=](int64_t begin, int64_t end) {
          for (int64_t o = begin; o < end; ++o) {
            const T* row = x + o * n;
            double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            int64_t r = 0;
            for (; r + 4 <= n; r += 4) {
              a0 += double(row[r]);
              a1 += double(row[r + 1]);
              a2 += double(row[r + 2]);
              a3 += double(row[r + 3]);
            }
            for (; r < n; ++r) a0 += double(row[r]);
            y[o] = T(((a0 + a1) + (a2 + a3)) * scale);
          }
        },
        std::max<int64_t>(n, 1));
    return;
  }
  const int64_t tiles_per_row = (inner + kTile - 1) / kTile;
  parallel_range(
      outer * tiles_per_row,
      [=](int64_t begin, int64_t end) {
        double acc[kTile];
        for (int64_t t = begin; t < end; ++t) {
          const int64_t o = t / tiles_per_row, i0 = (t % tiles_per_row) * kTile;
          const int64_t w = std::min(kTile, inner - i0);
          std::fill_n(acc, w, 0.0);
          const T* base = x + o * n * inner + i0;
          for (int64_t r = 0; r < n; ++r) {
            const T* run = base + r * inner;
            for (int64_t j = 0; j < w; ++j) acc[j] += double(run[j]);
          }
          T* out = y + o * inner + i0;
          for (int64_t j = 0; j < w; ++j) out[j] = T(acc[j] * scale);
        }
      },
      std::max<int64_t>(n, 1) * std::min(kTile, inner));
}

template <typename T>
void max_dim(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx) {
  const int64_t tile = std::min(kTile, inner);
  const int64_t tiles_per_row = (inner + tile - 1) / tile;
  parallel_range(
      outer * tiles_per_row,
      [=](int64_t begin, int64_t end) {
        T best[kTile];
        int64_t at[kTile];
        for (int64_t t = begin; t < end; ++t) {
          const int64_t o = t / tiles_per_row, i0 = (t % tiles_per_row) * tile;
          const int64_t w = std::min(tile, inner - i0);
          const T* base = x + o * n * inner + i0;
          for (int64_t j = 0; j < w; ++j) best[j] = base[j], at[j] = 0;
          for (int64_t r = 1; r < n; ++r) {
            const T* run = base + r * inner;
            for (int64_t j = 0; j < w; ++j)
              if (beats(run[j], best[j])) best[j] = run[j], at[j] = r;
          }
          for (int64_t j = 0; j < w; ++j) y[o * inner + i0 + j] = best[j], idx[o * inner + i0 + j] = at[j];
        }
      },
      n * tile);
}

template <typename T>
void max_dim_backward(int64_t outer, int64_t n, int64_t inner, const T* dy, const int64_t* idx, T* dx) {
  std::memset(dx, 0, size_t(outer * n * inner) * sizeof(T));
  parallel_for(outer * inner, [=](int64_t k) {
    const int64_t o = k / inner, i = k % inner;
    dx[(o * n + idx[k]) * inner + i] = dy[k];
  });
}

#define RT_INSTANTIATE(T)                                                                        \
  template void sum_dim<T>(int64_t, int64_t, int64_t, const T*, double, T*);                     \
  template void max_dim<T>(int64_t, int64_t, int64_t, const T*, T*, int64_t*);                   \
  template void max_dim_backward<T>(int64_t, int64_t, int64_t, const T*, const int64_t*, T*);
RT_INSTANTIATE(float)
RT_INSTANTIATE(double)
#undef RT_INSTANTIATE

}  // namespace rt::cpu
