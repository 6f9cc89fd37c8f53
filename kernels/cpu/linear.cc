#include "kernels/cpu/linear.h"

#include "kernels/cpu/eigen_maps.h"

namespace rt::cpu {

template <typename T>
void linear_forward(int64_t N, int64_t in, int64_t out, const T* x, const T* w, const T* b, T* y) {
  auto Y = mat(y, N, out, out);
  Y.noalias() = cmat(x, N, in, in) * cmat(w, out, in, in).transpose();
  if (b) Y.rowwise() += cmat(b, 1, out, out).row(0);
}

template <typename T>
void linear_backward(int64_t N, int64_t in, int64_t out, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db) {
  auto dY = cmat(dy, N, out, out);
  if (dx) mat(dx, N, in, in).noalias() = dY * cmat(w, out, in, in);
  if (dw) mat(dw, out, in, in).noalias() = dY.transpose() * cmat(x, N, in, in);
  if (db) mat(db, 1, out, out) = dY.colwise().sum();
}

template void linear_forward<float>(int64_t, int64_t, int64_t, const float*, const float*, const float*, float*);
template void linear_forward<double>(int64_t, int64_t, int64_t, const double*, const double*, const double*, double*);
template void linear_backward<float>(int64_t, int64_t, int64_t, const float*, const float*, const float*, float*,
                                     float*, float*);
template void linear_backward<double>(int64_t, int64_t, int64_t, const double*, const double*, const double*,
                                      double*, double*, double*);

}  // namespace rt::cpu
