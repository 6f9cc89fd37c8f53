#include "kernels/cpu/linear.h"

#include <vector>

#include "kernels/cpu/gemm.h"

namespace rt::cpu {

template <typename T>
void linear_forward(int64_t N, int64_t in, int64_t out, const T* x, const T* w, const T* b, T* y) {
  gemm<T>(false, true, N, out, in, x, in, w, in, false, y, out);  // y = x W^T
  if (b)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = 0; o < out; ++o) y[i * out + o] += b[o];
}

template <typename T>
void linear_backward(int64_t N, int64_t in, int64_t out, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db) {
  if (dx) gemm<T>(false, false, N, in, out, dy, out, w, in, false, dx, in);  // dx = dy W
  if (dw) gemm<T>(true, false, out, in, N, dy, out, x, in, false, dw, in);   // dw = dy^T x
  if (db) {
    std::vector<double> acc(static_cast<size_t>(out), 0.0);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = 0; o < out; ++o) acc[o] += dy[i * out + o];
    for (int64_t o = 0; o < out; ++o) db[o] = T(acc[o]);
  }
}

template void linear_forward<float>(int64_t, int64_t, int64_t, const float*, const float*, const float*, float*);
template void linear_forward<double>(int64_t, int64_t, int64_t, const double*, const double*, const double*, double*);
template void linear_backward<float>(int64_t, int64_t, int64_t, const float*, const float*, const float*, float*,
                                     float*, float*);
template void linear_backward<double>(int64_t, int64_t, int64_t, const double*, const double*, const double*,
                                      double*, double*, double*);

}  // namespace rt::cpu
