// Multi-tensor sums of squares, clip_grad_norm's coefficient, and scaling by a device scalar.
//
// Note [Deterministic norms]
// A list's sums of squares are taken per chunk of the multi-tensor apply
// (Note [Multi-tensor apply] in kernels/cuda/multi_tensor_plan.h): the block that walks chunk c sums its
// elements (thread t the elements begin + t + k * blockDim.x, in order), tree-reduces its
// threads' sums (detail::block_sum, a fixed order) and writes the chunk's sum to its own
// slot, partials[c]; readers add a tensor's chunk partials in chunk order. No atomics, and
// the chunks depend on the sizes only (not on the grid or the GPU), so the result is the same
// on every run, whatever the scheduling.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/grad_norm.h"
#include "kernels/cuda/multi_tensor_apply.cuh"

namespace rt::cuda {
namespace {

constexpr int kThreads = 256;

// ---- ops and kernels -------------------------------------------------------------------

// Operand: ptr[0] the tensor read.
template <typename T>
struct SumSquaresOp {
  T* partials;  // [chunks]
  __device__ void operator()(const MtaRow& r, int64_t c, int64_t begin, int64_t end) const {
    RT_SHARED(T, smem, [kMtaThreads]);
    const T* x = static_cast<const T*>(r.ptr[0]);
    T s = 0;
    RT_MTA_FOR(i, begin, end) s += x[i] * x[i];
    s = detail::block_sum(s, smem);
    if (threadIdx.x == 0) partials[c] = s;
  }
};

// Operand: ptr[0] the tensor scaled in place.
template <typename T>
struct ScaleOp {
  const double* coef;  // []
  __device__ void operator()(const MtaRow& r, int64_t, int64_t begin, int64_t end) const {
    T* x = static_cast<T*>(r.ptr[0]);
    const T k = T(*coef);
    RT_MTA_FOR(i, begin, end) x[i] = x[i] * k;
  }
};

// One block: thread t handles tensors t, t + kThreads, ...; block_sum adds their squared norms.
template <typename T>
__global__ void clip_coef_kernel(MtaView v, const T* partials /* [chunks] */, double max_norm, T* total_out /* [] */,
                                 double* coef_out /* [] */) {
  RT_SHARED(double, smem, [kThreads]);
  double sq = 0.0;
  for (int64_t i = threadIdx.x; i < v.count; i += blockDim.x) {
    const MtaRow& r = v.rows[i];
    double s = 0.0;
    for (int64_t c = r.first_chunk, e = c + (r.n + kMtaChunk - 1) / kMtaChunk; c < e; ++c) s += double(partials[c]);
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

// ---- launchers -------------------------------------------------------------------------

void check_norm_dtype(DType t, const char* op) {
  RT_CHECK(t == DType::f32 || t == DType::f64, op, ": expected f32 or f64 tensors, got ", dtype_name(t));
}

}  // namespace

int64_t multi_tensor_chunks(const std::vector<int64_t>& n) {
  int64_t chunks = 0;
  for (int64_t k : n) chunks += k > 0 ? mta_chunks(k) : 0;
  return chunks;
}

void sum_squares_partials(DType t, const std::vector<const void*>& x, const std::vector<int64_t>& n,
                          MultiTensorTable& table, void* partials, cudaStream_t s) {
  check_norm_dtype(t, "sum_squares_partials");
  RT_CHECK(x.size() == n.size(), "sum_squares_partials: ", x.size(), " tensors but ", n.size(), " sizes");
  std::vector<MtaRow> rows(x.size(), MtaRow{});
  for (size_t i = 0; i < n.size(); ++i) {
    RT_CHECK(n[i] >= 0, "sum_squares_partials: negative element count ", n[i]);
    RT_CHECK(n[i] == 0 || x[i] != nullptr, "sum_squares_partials: null tensor");
    rows[i].ptr[0] = const_cast<void*>(x[i]);
    rows[i].n = n[i];
  }
  RT_CHECK(partials != nullptr || multi_tensor_chunks(n) == 0, "sum_squares_partials: null partials");
  static_assert((kMtaThreads & (kMtaThreads - 1)) == 0, "block_sum needs a power of two");
  table.set(std::move(rows), std::vector<int>(x.size(), 0), s);
  detail::dispatch_f32_f64(t, [&](auto z) {
    using T = decltype(z);
    multi_tensor_apply(table, SumSquaresOp<T>{static_cast<T*>(partials)}, NoGroups{}, 2.0, t == DType::f64, s);
  });
}

void clip_grad_coef(DType t, MultiTensorTable& table, const void* partials, double max_norm, void* total_out,
                    double* coef_out, cudaStream_t s) {
  check_norm_dtype(t, "clip_grad_coef");
  RT_CHECK((table.chunks() == 0 || partials != nullptr) && total_out != nullptr && coef_out != nullptr,
           "clip_grad_coef: null pointer");
  detail::dispatch_f32_f64(t, [&](auto z) {
    using T = decltype(z);
    RT_LAUNCH(1, kThreads, 0, s, clip_coef_kernel<T>)(table.view(), static_cast<const T*>(partials), max_norm,
                                                       static_cast<T*>(total_out), coef_out);
    CUDA_CHECK_LAUNCH();
  });
  table.used_on(s);
}

void scale_by_device_coef(DType t, MultiTensorTable& table, const double* coef, cudaStream_t s) {
  check_norm_dtype(t, "scale_by_device_coef");
  RT_CHECK(table.chunks() == 0 || coef != nullptr, "scale_by_device_coef: null coef");
  detail::dispatch_f32_f64(t, [&](auto z) {
    using T = decltype(z);
    multi_tensor_apply(table, ScaleOp<T>{coef}, NoGroups{}, 1.0, t == DType::f64, s);
  });
}

}  // namespace rt::cuda
