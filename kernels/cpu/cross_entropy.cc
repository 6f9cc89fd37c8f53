#include "kernels/cpu/cross_entropy.h"

#include <cstddef>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace rt::cpu {

template <typename T>
double cross_entropy_forward(int64_t N, int64_t K, const T* logits, const int64_t* target, double smoothing,
                             T* probs) {
  std::vector<double> row_loss(static_cast<size_t>(N));
  parallel_for(N, [&](int64_t i) {
    const T* z = logits + i * K;
    double mx = z[0];
    for (int64_t k = 1; k < K; ++k) mx = std::max(mx, double(z[k]));
    double se = 0, sum_z = 0;
    for (int64_t k = 0; k < K; ++k) {
      se += std::exp(double(z[k]) - mx);
      sum_z += double(z[k]);
    }
    const double lse = mx + std::log(se);  // log sum exp
    for (int64_t k = 0; k < K; ++k) probs[i * K + k] = T(std::exp(double(z[k]) - lse));
    const double nll = lse - double(z[target[i]]);
    const double smooth = lse - sum_z / double(K);  // mean_k(-log p_k)
    row_loss[i] = (1.0 - smoothing) * nll + smoothing * smooth;
  }, K);
  double s = 0;
  for (double v : row_loss) s += v;
  return s / double(N);
}

template <typename T>
void cross_entropy_backward(int64_t N, int64_t K, const T* probs, const int64_t* target, double smoothing, double g,
                            T* dlogits) {
  const double scale = g / double(N), off = smoothing / double(K);
  parallel_for(N, [&](int64_t i) {
    for (int64_t k = 0; k < K; ++k) {
      const double want = (k == target[i] ? 1.0 - smoothing : 0.0) + off;
      dlogits[i * K + k] = T(scale * (double(probs[i * K + k]) - want));
    }
  }, K);
}

template double cross_entropy_forward<float>(int64_t, int64_t, const float*, const int64_t*, double, float*);
template double cross_entropy_forward<double>(int64_t, int64_t, const double*, const int64_t*, double, double*);
template void cross_entropy_backward<float>(int64_t, int64_t, const float*, const int64_t*, double, double, float*);
template void cross_entropy_backward<double>(int64_t, int64_t, const double*, const int64_t*, double, double,
                                             double*);

}  // namespace rt::cpu
