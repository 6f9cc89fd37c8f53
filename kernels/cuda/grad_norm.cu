// Multi-tensor sums of squares, clip_grad_norm's coefficient, and scaling by a device scalar.
//
// Note [Deterministic norms]
// A tensor's sum of squares is computed by a fixed grid: kNormBlocks blocks of kThreads
// threads, grid.y indexing the tensors of one launch (pointers in the kernel's parameter
// block, kMaxNormTensors at a time). Thread t of block b sums the elements
// b * kThreads + t + k * kNormBlocks * kThreads in order, the block tree-reduces its
// threads' sums (detail::block_sum, a fixed order), and the block's sum lands in its own
// slot of the partials buffer; readers add a tensor's kNormBlocks partials in index order.
// No atomics, so the result is the same on every run, whatever the scheduling.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/grad_norm.cuh"

namespace rt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxNormTensors = 96;
constexpr int kMaxBlocksX = 1024;

struct NormBatch {
  const void* x[kMaxNormTensors];
  int64_t n[kMaxNormTensors];
  int64_t first;  // index of t[0] in the whole list (its partials' row)
};
struct ScaleBatch {
  void* x[kMaxNormTensors];
  int64_t n[kMaxNormTensors];
};
static_assert(sizeof(NormBatch) < 4000 && sizeof(ScaleBatch) < 4000, "kernel parameters are limited to 4 KiB");

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void sum_squares_kernel(NormBatch b, T* partials /* [count, kNormBlocks] */) {
  RT_SHARED(T, smem, [kThreads]);
  const T* x = static_cast<const T*>(b.x[blockIdx.y]);
  const int64_t n = b.n[blockIdx.y];
  T s = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    s += x[i] * x[i];
  s = detail::block_sum(s, smem);
  if (threadIdx.x == 0) partials[(b.first + blockIdx.y) * kNormBlocks + blockIdx.x] = s;
}

// One block: thread t handles tensors t, t + kThreads, ...; block_sum adds their squared norms.
template <typename T>
__global__ void clip_coef_kernel(int64_t count, const T* partials /* [count, kNormBlocks] */, double max_norm,
                                 T* total_out /* [] */, double* coef_out /* [] */) {
  RT_SHARED(double, smem, [kThreads]);
  double sq = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    double s = 0.0;
    for (int b = 0; b < kNormBlocks; ++b) s += double(partials[i * kNormBlocks + b]);
    const double norm = sqrt(s);  // torch: the norm of the per-tensor norms
    sq += norm * norm;
  }
  sq = detail::block_sum(sq, smem);
  if (threadIdx.x == 0) {
    const double total = sqrt(sq);
    *total_out = T(total);
    *coef_out = fmin(max_norm / (total + 1e-6), 1.0);
  }
}

template <typename T>
__global__ void scale_kernel(ScaleBatch b, const double* coef) {
  T* x = static_cast<T*>(b.x[blockIdx.y]);
  const int64_t n = b.n[blockIdx.y];
  const T c = T(*coef);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = x[i] * c;
}

// ---- launchers -------------------------------------------------------------------------

void check_norm_dtype(DType t, const char* op) {
  RT_CHECK(t == DType::f32 || t == DType::f64, op, ": expected f32 or f64 tensors, got ", dtype_name(t));
}

template <typename F>
void dispatch(DType t, F&& f) {
  if (t == DType::f32) f(float{});
  else f(double{});
}

}  // namespace

void sum_squares_partials(DType t, const std::vector<const void*>& x, const std::vector<int64_t>& n, void* partials,
                          cudaStream_t s) {
  check_norm_dtype(t, "sum_squares_partials");
  RT_CHECK(x.size() == n.size(), "sum_squares_partials: ", x.size(), " tensors but ", n.size(), " sizes");
  RT_CHECK(x.empty() || partials != nullptr, "sum_squares_partials: null partials");
  for (size_t i = 0; i < n.size(); ++i) {
    RT_CHECK(n[i] >= 0, "sum_squares_partials: negative element count ", n[i]);
    RT_CHECK(n[i] == 0 || x[i] != nullptr, "sum_squares_partials: null tensor");
  }
  static_assert((kThreads & (kThreads - 1)) == 0, "block_sum needs a power of two");
  dispatch(t, [&](auto z) {
    using T = decltype(z);
    for (size_t first = 0; first < x.size(); first += kMaxNormTensors) {
      const size_t k = std::min<size_t>(kMaxNormTensors, x.size() - first);
      NormBatch b{};
      b.first = int64_t(first);
      for (size_t j = 0; j < k; ++j) {
        b.x[j] = x[first + j];
        b.n[j] = n[first + j];
      }
      // Every tensor's row is written, empty ones with zeros: the grid is fixed.
      RT_LAUNCH(dim3(kNormBlocks, unsigned(k)), kThreads, 0, s, sum_squares_kernel<T>)(b, static_cast<T*>(partials));
      CUDA_CHECK_LAUNCH();
    }
  });
}

void clip_grad_coef(DType t, int64_t count, const void* partials, double max_norm, void* total_out, double* coef_out,
                    cudaStream_t s) {
  check_norm_dtype(t, "clip_grad_coef");
  RT_CHECK(count >= 0, "clip_grad_coef: negative tensor count ", count);
  RT_CHECK((count == 0 || partials != nullptr) && total_out != nullptr && coef_out != nullptr,
           "clip_grad_coef: null pointer");
  dispatch(t, [&](auto z) {
    using T = decltype(z);
    RT_LAUNCH(1, kThreads, 0, s, clip_coef_kernel<T>)(count, static_cast<const T*>(partials), max_norm,
                                                       static_cast<T*>(total_out), coef_out);
    CUDA_CHECK_LAUNCH();
  });
}

void scale_by_device_coef(DType t, const std::vector<void*>& x, const std::vector<int64_t>& n, const double* coef,
                          cudaStream_t s) {
  check_norm_dtype(t, "scale_by_device_coef");
  RT_CHECK(x.size() == n.size(), "scale_by_device_coef: ", x.size(), " tensors but ", n.size(), " sizes");
  RT_CHECK(x.empty() || coef != nullptr, "scale_by_device_coef: null coef");
  for (size_t i = 0; i < n.size(); ++i) {
    RT_CHECK(n[i] >= 0, "scale_by_device_coef: negative element count ", n[i]);
    RT_CHECK(n[i] == 0 || x[i] != nullptr, "scale_by_device_coef: null tensor");
  }
  dispatch(t, [&](auto z) {
    using T = decltype(z);
    for (size_t first = 0; first < x.size(); first += kMaxNormTensors) {
      const size_t k = std::min<size_t>(kMaxNormTensors, x.size() - first);
      ScaleBatch b{};
      int64_t max_n = 0;
      for (size_t j = 0; j < k; ++j) {
        b.x[j] = x[first + j];
        b.n[j] = n[first + j];
        max_n = std::max(max_n, n[first + j]);
      }
      if (max_n == 0) continue;
      const dim3 grid(std::min(detail::grid_for(max_n, kThreads), kMaxBlocksX), unsigned(k));
      RT_LAUNCH(grid, kThreads, 0, s, scale_kernel<T>)(b, coef);
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace rt::cuda
