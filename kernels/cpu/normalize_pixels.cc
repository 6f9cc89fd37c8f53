#include "kernels/cpu/normalize_pixels.h"

#include <cmath>

#include "kernels/cpu/parallel.h"

namespace rt::cpu {

template <typename T>
void normalize_pixels(const uint8_t* x, int64_t N, int64_t H, int64_t W, int64_t C, const T* scale, const T* bias,
                      bool nhwc_out, T* y) {
  const int64_t plane = H * W;
  // One task per (image, row): rows are a few KB, enough to amortise a thread.
  parallel_range(N * H, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t n = r / H, h = r % H;
      const uint8_t* src = x + r * W * C;
      if (nhwc_out) {
        T* dst = y + r * W * C;
        for (int64_t w = 0; w < W; ++w)
          for (int64_t c = 0; c < C; ++c) dst[w * C + c] = std::fma(T(src[w * C + c]), scale[c], bias[c]);
      } else {
        for (int64_t c = 0; c < C; ++c) {
          T* dst = y + (n * C + c) * plane + h * W;
          const T s = scale[c], b = bias[c];
          for (int64_t w = 0; w < W; ++w) dst[w] = std::fma(T(src[w * C + c]), s, b);
        }
      }
    }
  }, W * C);
}

template void normalize_pixels<float>(const uint8_t*, int64_t, int64_t, int64_t, int64_t, const float*, const float*,
                                      bool, float*);
template void normalize_pixels<double>(const uint8_t*, int64_t, int64_t, int64_t, int64_t, const double*,
                                       const double*, bool, double*);

}  // namespace rt::cpu
