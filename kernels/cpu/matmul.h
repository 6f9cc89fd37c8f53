// Batched matrix products on the CPU through cpu::gemm (Eigen), row-major dense matrices:
//   c[i] (M x N) = op(a[i]) op(b[i])   for i < batch
// op(a) is M x K: a[i] itself (M x K) or, with ta, the transpose of a K x M a[i]; likewise
// op(b) is K x N (b[i] stored N x K with tb). The matrices of a batch follow each other
// (a[i] at a + i*M*K, b[i] at b + i*K*N, c[i] at c + i*M*N).
#pragma once

#include <cstdint>

namespace rt::cpu {

template <typename T>
void matmul(int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* a, const T* b, T* c);

}  // namespace rt::cpu
