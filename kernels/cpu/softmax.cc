// softmax over a middle dim in tiles of up to kTile consecutive i of one o: each pass walks
// r = 0 .. n-1 over contiguous runs, the tile's maxima and sums in local arrays (inner == 1
// is a tile of one: a row).
#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/parallel.h"

namespace rt::cpu {
namespace {

constexpr int64_t kTile = 64;

// Calls f(base offset of the tile, width) for every tile, in parallel.
template <typename F>
void for_tiles(int64_t outer, int64_t n, int64_t inner, F&& f) {
  const int64_t tile = std::min(kTile, inner);
  const int64_t per_row = tile == 0 ? 0 : (inner + tile - 1) / tile;
  parallel_range(
      outer * per_row,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t o = t / per_row, i0 = (t % per_row) * tile;
          f(o * n * inner + i0, std::min(tile, inner - i0));
        }
      },
      std::max<int64_t>(n, 1) * tile * 8);
}

}  // namespace

template <typename T>
void softmax_forward(bool log, int64_t outer, int64_t n, int64_t inner, const T* x, T* y) {
  if (n == 0) return;
  for_tiles(outer, n, inner, [=](int64_t base, int64_t w) {
    double m[kTile], s[kTile];
    for (int64_t j = 0; j < w; ++j) m[j] = double(x[base + j]), s[j] = 0;
    for (int64_t r = 1; r < n; ++r)
      for (int64_t j = 0; j < w; ++j) {
        const double v = double(x[base + r * inner + j]);
        if (v > m[j] || v != v) m[j] = v;  // NaN propagates
      }
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < w; ++j) s[j] += std::exp(double(x[base + r * inner + j]) - m[j]);
    if (log) {
      for (int64_t j = 0; j < w; ++j) s[j] = std::log(s[j]);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < w; ++j) {
          const int64_t k = base + r * inner + j;
          y[k] = T((double(x[k]) - m[j]) - s[j]);
        }
    } else {
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < w; ++j) {
          const int64_t k = base + r * inner + j;
          y[k] = T(std::exp(double(x[k]) - m[j]) / s[j]);
        }
    }
  });
}

template <typename T>
void softmax_backward(bool log, int64_t outer, int64_t n, int64_t inner, const T* y, const T* dy, T* dx) {
  if (n == 0) return;
  for_tiles(outer, n, inner, [=](int64_t base, int64_t w) {
    double s[kTile];
    std::fill_n(s, w, 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < w; ++j) {
        const int64_t k = base + r * inner + j;
        s[j] += log ? double(dy[k]) : double(dy[k]) * double(y[k]);
      }
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < w; ++j) {
        const int64_t k = base + r * inner + j;
        dx[k] = log ? T(double(dy[k]) - std::exp(double(y[k])) * s[j]) : T(double(y[k]) * (double(dy[k]) - s[j]));
      }
  });
}

template void softmax_forward<float>(bool, int64_t, int64_t, int64_t, const float*, float*);
template void softmax_forward<double>(bool, int64_t, int64_t, int64_t, const double*, double*);
template void softmax_backward<float>(bool, int64_t, int64_t, int64_t, const float*, const float*, float*);
template void softmax_backward<double>(bool, int64_t, int64_t, int64_t, const double*, const double*, double*);

}  // namespace rt::cpu
