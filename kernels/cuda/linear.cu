// linear: cuBLAS GEMMs for y = x W^T, dx = dy W, dw = dy^T x, plus two small kernels: the
// bias add over rows and the bias gradient (column sums of dy).
//
// Note [Row-major through column-major cuBLAS]
// A row-major r x c buffer is the column-major c x r matrix (its transpose), leading
// dimension c. So every product is computed transposed: y^T (out x N) = W^T^T ... concretely
//   y^T  (out x N) = op_T(w: in x out) * x^T (in x N)        m=out n=N   k=in
//   dx^T (in x N)  = w^T (in x out)    * dy^T (out x N)      m=in  n=N   k=out
//   dw^T (in x out) = x^T (in x N)     * op_T(dy^T: out x N) m=in  n=out k=N
//
// cuBLAS's handle, types and checks are shared with matmul (blas.h).
#include <cublas_v2.h>

#include <atomic>

#include "kernels/cuda/channel_reduce.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/linear.h"

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::from_acc;
using detail::to_acc;

std::atomic<bool> g_allow_tf32{false};

// ---- kernels ---------------------------------------------------------------------------

// y[r, c] += b[c] over an N x out row-major matrix.
template <typename T>
__global__ void add_bias_kernel(int64_t N, int64_t out, const T* __restrict__ b, T* __restrict__ y) {
  const int64_t total = N * out;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_acc<T>(to_acc(y[i]) + to_acc(b[i % out]));
}

// db[c] = sum over rows r of dy[r, c]: the row-layout channel reduction (channels = the
// out columns) in one stage, 32 columns x 8 row lanes per block
// (Note [Two-stage channel reduction] in kernels/cuda/channel_reduce.cuh): deterministic,
// and ceil(out / 32) blocks with 8 lanes each instead of one thread walking all N rows per
// column.
template <typename T>
struct ColumnSumFold {
  using A = acc_t<T>;
  using State = detail::SumState<A>;
  static constexpr double kFlopsPerValue = 1;
  const T* dy;
  template <int U>
  __device__ void fold(State& st, int64_t, const int64_t (&idx)[U], int u) const {
    A v[U] = {};
    RT_UNROLL
    for (int k = 0; k < U; ++k)
      if (k < u) v[k] = to_acc(dy[idx[k]]);
    RT_UNROLL
    for (int k = 0; k < U; ++k) st.a += v[k];
  }
};
template <typename T>
struct WriteColumn {
  T* db;
  __device__ void operator()(int64_t c, const detail::SumState<acc_t<T>>& st) const { db[c] = from_acc<T>(st.a); }
};

// ---- launchers -------------------------------------------------------------------------

constexpr int kThreads = 256;

void check_sizes(int64_t N, int64_t in, int64_t out, const char* op) {
  RT_CHECK(N >= 0 && in >= 0 && out >= 0, op, ": negative size (N ", N, ", in ", in, ", out ", out, ")");
}

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

void linear_forward(DType t, int64_t N, int64_t in, int64_t out, const void* x, const void* w, const void* b, void* y,
                    cudaStream_t s) {
  check_sizes(N, in, out, "linear_forward");
  gemm_types(t, "linear");  // rejects other dtypes even when there is nothing to do
  if (N == 0 || out == 0) return;
  RT_CHECK(y != nullptr && (in == 0 || (x != nullptr && w != nullptr)), "linear_forward: null pointer");
  // y^T (out x N) = op_T(w) x^T; Note [Row-major through column-major cuBLAS].
  gemm(t, "linear", CUBLAS_OP_T, CUBLAS_OP_N, out, N, in, w, in, x, in, y, s);
  if (b == nullptr) return;
  detail::dispatch_floating(t, "linear_forward", [&](auto z) {
    using T = decltype(z);
    RT_LAUNCH(detail::grid_for(N * out, kThreads), kThreads, 0, s, add_bias_kernel<T>)(N, out, static_cast<const T*>(b),
                                                                               static_cast<T*>(y));
    CUDA_CHECK_LAUNCH();
  });
}

void linear_backward(DType t, int64_t N, int64_t in, int64_t out, const void* x, const void* w, const void* dy,
                     void* dx, void* dw, void* db, cudaStream_t s) {
  check_sizes(N, in, out, "linear_backward");
  gemm_types(t, "linear");
  RT_CHECK(dy != nullptr || N * out == 0, "linear_backward: null dy");
  if (dx != nullptr) {
    RT_CHECK(w != nullptr || in * out == 0, "linear_backward: dx needs w");
    gemm(t, "linear", CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, w, in, dy, out, dx, s);
  }
  if (dw != nullptr) {
    RT_CHECK(x != nullptr || N * in == 0, "linear_backward: dw needs x");
    gemm(t, "linear", CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, x, in, dy, out, dw, s);
  }
  if (db != nullptr && out > 0) {
    detail::dispatch_floating(t, "linear_backward", [&](auto z) {
      using T = decltype(z);
      if (N == 0) {
        CUDA_CHECK(cudaMemsetAsync(db, 0, size_t(out) * sizeof(T), s));
        return;
      }
      detail::channel_reduce_single<T>(detail::plan_channel_reduce(N, out, 1, true, 1),
                                       ColumnSumFold<T>{static_cast<const T*>(dy)}, WriteColumn<T>{static_cast<T*>(db)},
                                       s);
    });
  }
}

}  // namespace rt::cuda
