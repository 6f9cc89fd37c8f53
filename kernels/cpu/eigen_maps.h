// Row-major Eigen views over raw buffers: how the CPU kernels hand matrices to Eigen's
// GEMM without copies. OuterStride lets a view pick a column block (e.g. one group's
// channels of an NHWC image).
#pragma once

#include <cstddef>
#include <Eigen/Core>

namespace rt::cpu {

template <typename T>
using MatR = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MapR = Eigen::Map<MatR<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using CMapR = Eigen::Map<const MatR<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <typename T>
MapR<T> mat(T* p, int64_t rows, int64_t cols, int64_t stride) {
  return MapR<T>(p, rows, cols, Eigen::OuterStride<>(stride));
}
template <typename T>
CMapR<T> cmat(const T* p, int64_t rows, int64_t cols, int64_t stride) {
  return CMapR<T>(p, rows, cols, Eigen::OuterStride<>(stride));
}

}  // namespace rt::cpu
