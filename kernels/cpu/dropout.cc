#include "kernels/cpu/dropout.h"

#include "kernels/cpu/parallel.h"

namespace rt::cpu {
namespace {

// splitmix64 draw k after `state`: the constants of Generator::next_u64 (engine/random.cc,
// which this layer cannot include); tests/dropout_test.cc checks the mask against it.
inline double uniform_draw(uint64_t state, uint64_t k) {
  uint64_t z = state + (k + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1.0p-53;
}

}  // namespace

template <typename T>
void dropout(uint64_t state, const DropoutLayout& at, double p, double scale, const T* x, T* y) {
  const int64_t C = at.C, H = at.H, W = at.W, total = at.N * C * H * W;
  const bool nhwc = at.channels_last;
  parallel_range(
      total,
      [=](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) {
          int64_t i = j;
          if (nhwc) {  // NHWC offset j -> logical NCHW index
            const int64_t c = j % C, q = j / C, w = q % W, r = q / W, h = r % H, n = r / H;
            i = ((n * C + c) * H + h) * W + w;
          }
          y[j] = T(double(x[j]) * (uniform_draw(state, uint64_t(i)) >= p ? scale : 0.0));
        }
      },
      8);
}

template void dropout<float>(uint64_t, const DropoutLayout&, double, double, const float*, float*);
template void dropout<double>(uint64_t, const DropoutLayout&, double, double, const double*, double*);

}  // namespace rt::cpu
