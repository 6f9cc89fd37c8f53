#include "kernels/cpu/batch_augment.h"

#include <algorithm>

#include "kernels/cpu/parallel.h"

namespace rt::cpu {

template <typename T>
void mix_with_rolled(const T* x, int64_t N, int64_t C, int64_t H, int64_t W, bool nhwc, T lam, int64_t y1,
                     int64_t y2, int64_t x1, int64_t x2, T* y) {
  const int64_t image = C * H * W;
  const T a = lam, b = T(1) - lam;
  const bool copy = lam == T(0);
  // One task per (image, channel, row) in NCHW, per (image, row) in NHWC: a row of W (x C) values.
  const int64_t rows = nhwc ? N * H : N * C * H, row_len = nhwc ? W * C : W;
  parallel_range(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t h = r % H, n = nhwc ? r / H : r / (C * H);
      const int64_t prev = (n + N - 1) % N;
      const T* src = x + r * row_len;
      const T* rolled = src + (prev - n) * image;
      T* dst = y + r * row_len;
      const bool in_rows = h >= y1 && h < y2;
      const int64_t lo = in_rows ? std::clamp<int64_t>(x1, 0, W) : 0, hi = in_rows ? std::clamp<int64_t>(x2, lo, W) : 0;
      const int64_t step = nhwc ? C : 1;  // elements per column
      std::copy(src, src + lo * step, dst);
      for (int64_t i = lo * step; i < hi * step; ++i) dst[i] = copy ? rolled[i] : a * src[i] + b * rolled[i];
      std::copy(src + hi * step, src + row_len, dst + hi * step);
    }
  }, row_len);
}

template <typename T>
void mix_targets(const int64_t* labels, int64_t N, int64_t K, T lam, T* t) {
  std::fill(t, t + N * K, T(0));
  for (int64_t n = 0; n < N; ++n) {
    t[n * K + labels[n]] += lam;
    t[n * K + labels[(n + N - 1) % N]] += T(1) - lam;
  }
}

template <typename T>
void erase_boxes(T* x, int64_t N, int64_t C, int64_t H, int64_t W, bool nhwc, const int64_t* boxes, T value) {
  parallel_range(N, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t* b = boxes + 4 * n;  // y1, y2, x1, x2
      const int64_t y1 = std::max<int64_t>(b[0], 0), y2 = std::min(b[1], H);
      const int64_t x1 = std::max<int64_t>(b[2], 0), x2 = std::min(b[3], W);
      if (y2 <= y1 || x2 <= x1) continue;
      T* img = x + n * C * H * W;
      for (int64_t h = y1; h < y2; ++h) {
        if (nhwc) {
          std::fill(img + (h * W + x1) * C, img + (h * W + x2) * C, value);
        } else {
          for (int64_t c = 0; c < C; ++c) std::fill(img + (c * H + h) * W + x1, img + (c * H + h) * W + x2, value);
        }
      }
    }
  }, C * H * W);
}

#define RT_BATCH_AUGMENT_INSTANTIATE(T)                                                                           \
  template void mix_with_rolled<T>(const T*, int64_t, int64_t, int64_t, int64_t, bool, T, int64_t, int64_t,        \
                                   int64_t, int64_t, T*);                                                          \
  template void mix_targets<T>(const int64_t*, int64_t, int64_t, T, T*);                                          \
  template void erase_boxes<T>(T*, int64_t, int64_t, int64_t, int64_t, bool, const int64_t*, T);
RT_BATCH_AUGMENT_INSTANTIATE(float)
RT_BATCH_AUGMENT_INSTANTIATE(double)
#undef RT_BATCH_AUGMENT_INSTANTIATE

}  // namespace rt::cpu
