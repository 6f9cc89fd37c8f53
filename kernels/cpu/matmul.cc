// Large products run one after another, each GEMM using every core (Eigen's OpenMP
// blocking); a batch of small ones runs its products in parallel instead, one per thread
// (Eigen's GEMM stays single-threaded inside a parallel region).
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

namespace rt::cpu {
namespace {

// Multiply-adds below which a product is too small to spread over the cores by itself.
constexpr int64_t kSmallProduct = 1 << 16;

}  // namespace

template <typename T>
void matmul(int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* a, const T* b, T* c) {
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum
    std::memset(c, 0, size_t(batch * M * N) * sizeof(T));
    return;
  }
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  auto one = [=](int64_t i) {
    gemm<T>(ta, tb, M, N, K, a + i * M * K, lda, b + i * K * N, ldb, false, c + i * M * N, N);
  };
  const int64_t macs = M * N * K;
  if (batch > 1 && macs < kSmallProduct) {
    parallel_for(batch, one, macs);
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
}

template void matmul<float>(int64_t, bool, bool, int64_t, int64_t, int64_t, const float*, const float*, float*);
template void matmul<double>(int64_t, bool, bool, int64_t, int64_t, int64_t, const double*, const double*, double*);

}  // namespace rt::cpu
