// The kernels of planted.h: each right version next to its planted bug.
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.cuh"
#include "tests/cuda_emu/planted.h"

namespace rt::emu_test {
namespace {

template <bool kMissingBarrier>
__global__ void block_sum_kernel(const float* x, int n, float* y) {
  RT_SHARED(float, smem, [1024]);
  const int t = int(threadIdx.x);
  float v = 0;
  for (int i = t; i < n; i += int(blockDim.x)) v += x[i];
  smem[t] = v;
  __syncthreads();
  for (int w = int(blockDim.x) / 2; w > 0; w >>= 1) {
    if (t < w) smem[t] += smem[t + w];
    if (!kMissingBarrier) __syncthreads();
  }
  if (t == 0) y[0] = smem[0];
}

// The block's sum of v by a shared-memory tree, its barriers inside (like a block_sum helper),
// inlined wherever it is called (nvcc inlines device functions; Note [Barrier instances]).
__device__ __attribute__((always_inline)) inline float tree_sum(float* smem, float v) {
  const int t = int(threadIdx.x);
  smem[t] = v;
  for (int w = int(blockDim.x) / 2; w > 0; w >>= 1) {
    __syncthreads();
    if (t < w) smem[t] += smem[t + w];
  }
  __syncthreads();
  const float total = smem[0];
  __syncthreads();
  return total;
}

template <bool kInBranches>
__global__ void helper_sum_kernel(const float* x, int n, float* y) {
  RT_SHARED(float, smem, [1024]);
  const int t = int(threadIdx.x);
  const float v = t < n ? x[t] : 0.0f;
  if (!kInBranches) {
    const float s = tree_sum(smem, v);
    if (t == 0) y[0] = s;
  } else if (t % 2 == 0) {  // the bug: the even threads meet at one copy of the helper's barriers, the odd at another
    const float s = tree_sum(smem, v);
    if (t == 0) y[0] = s;
  } else {
    const float s = tree_sum(smem, 2.0f * v) * 0.5f;
    if (t == 1) y[1] = s;
  }
}

// Lane 0 hands a value to lane 1 through shared memory; it passed a __syncwarp of its own
// (mask 1) before writing. Only a __syncwarp naming both lanes orders the handoff.
template <bool kSynced>
__global__ void warp_handoff_kernel(float* y) {
  RT_SHARED(float, smem, [32]);
  const int lane = int(threadIdx.x);
  smem[lane] = 0.0f;
  __syncthreads();
  if (lane == 0) {
    __syncwarp(1u);
    smem[0] = 1.0f;
  }
  if (kSynced) __syncwarp();  // the planted bug leaves it out: lanes are not in lock-step since Volta
  if (lane == 1) y[0] = smem[0];
}

__global__ void block_sum_branch_kernel(const float* x, int n, float* y) {
  RT_SHARED(float, smem, [1024]);
  const int t = int(threadIdx.x);
  smem[t] = t < n ? x[t] : 0.0f;
  if (t < int(blockDim.x) / 2) __syncthreads();  // the bug: not every thread gets here
  if (t == 0) {
    float s = 0;
    for (int i = 0; i < int(blockDim.x); ++i) s += smem[i];
    y[0] = s;
  }
}

__global__ void block_sum_early_return_kernel(const float* x, int n, float* y) {
  RT_SHARED(float, smem, [1024]);
  const int t = int(threadIdx.x);
  if (t >= n) return;  // the bug: these threads miss the barrier below
  smem[t] = x[t];
  __syncthreads();
  if (t == 0) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += smem[i];
    y[0] = s;
  }
}

__global__ void pair_sum_kernel(const float* x, int64_t n, float* y, bool overread) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[i] + (i + 1 < n || overread ? x[i + 1] : 0.0f);
}

__global__ void warp_sums_kernel(const float* x, int n, float* y, bool early_exit) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (early_exit && i >= n) return;  // the bug: the full-mask shuffles below name these lanes
  float v = i < n ? x[i] : 0.0f;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) y[i / 32] = v;
}

__global__ void scale_kernel(const float* x, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = 2 * x[i];
}

struct alignas(16) F4 {
  float v[4];
};

__global__ void pack_copy_kernel(const float* x, int64_t packs, float* y) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < packs) reinterpret_cast<F4*>(y)[i] = reinterpret_cast<const F4*>(x)[i];
}

__global__ void shared_read_kernel(int written, int read_slot, float* y) {
  RT_SHARED(float, smem, [64]);
  const int t = int(threadIdx.x);
  if (t < written) smem[t] = float(t);
  __syncthreads();
  if (t == 0) y[0] = smem[read_slot];
}

__global__ void count_kernel(int64_t n, unsigned* counter) {
  if (blockIdx.x * int64_t(blockDim.x) + threadIdx.x < n) atomicAdd(counter, 1u);
}

__global__ void count_racy_kernel(int64_t n, unsigned* counter) {
  if (blockIdx.x * int64_t(blockDim.x) + threadIdx.x < n) {
    const unsigned seen = *counter;  // the bug: another thread may write between these two
    *counter = seen + 1;
  }
}

__global__ void mul_add_rn_kernel(const float* a, const float* b, const float* c, int n, float* y) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = __fadd_rn(__fmul_rn(a[i], b[i]), c[i]);
}

__global__ void index_add_kernel(const float* x, const int* idx, int n, float* y, bool atomic) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  if (atomic) atomicAdd(&y[idx[i]], x[i]);
  else y[idx[i]] += x[i];  // the bug: blocks hitting one index lose updates
}

__global__ void atomic_total_kernel(const float* x, int n, float* y, bool zero_in_kernel) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (zero_in_kernel && i == 0) *y = 0.0f;  // the bug: other blocks may have added already
  if (i < n) atomicAdd(y, x[i]);
}

__global__ void shift_left_kernel(float* y, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i + 1 < n) y[i] = y[i + 1];  // the bug: y[i + 1] is the next block's to write at a block's last thread
}

__global__ void shared_histogram_kernel(const int* bins, int n, unsigned* out, bool peek) {
  RT_SHARED(unsigned, hist, [16]);
  const int t = int(threadIdx.x);
  if (t < 16) hist[t] = 0;
  __syncthreads();
  for (int i = t; i < n; i += int(blockDim.x)) atomicAdd(&hist[bins[i]], 1u);
  if (peek && t == 0 && hist[bins[0]] == 0) out[16] = 1;  // the bug: a plain read among the atomics
  __syncthreads();
  if (t < 16) out[t] = hist[t];
}

}  // namespace

void index_add(const float* x, const int* idx, int n, float* y, bool atomic, cudaStream_t s) {
  RT_LAUNCH((n + 63) / 64, 64, 0, s, index_add_kernel)(x, idx, n, y, atomic);
  CUDA_CHECK_LAUNCH();
}

void atomic_total(const float* x, int n, float* y, bool zero_in_kernel, cudaStream_t s) {
  RT_LAUNCH((n + 63) / 64, 64, 0, s, atomic_total_kernel)(x, n, y, zero_in_kernel);
  CUDA_CHECK_LAUNCH();
}

void shift_left_in_place(float* y, int n, cudaStream_t s) {
  RT_LAUNCH((n + 63) / 64, 64, 0, s, shift_left_kernel)(y, n);
  CUDA_CHECK_LAUNCH();
}

void shared_histogram(const int* bins, int n, unsigned* out, bool peek, cudaStream_t s) {
  RT_LAUNCH(1, 64, 0, s, shared_histogram_kernel)(bins, n, out, peek);
  CUDA_CHECK_LAUNCH();
}

void block_sum(const float* x, int n, float* y, int threads, bool missing_barrier, cudaStream_t s) {
  if (missing_barrier) RT_LAUNCH(1, threads, 0, s, block_sum_kernel<true>)(x, n, y);
  else RT_LAUNCH(1, threads, 0, s, block_sum_kernel<false>)(x, n, y);
  CUDA_CHECK_LAUNCH();
}

void warp_handoff(float* y, bool synced, cudaStream_t s) {
  if (synced) RT_LAUNCH(1, 32, 0, s, warp_handoff_kernel<true>)(y);
  else RT_LAUNCH(1, 32, 0, s, warp_handoff_kernel<false>)(y);
  CUDA_CHECK_LAUNCH();
}

void helper_sum(const float* x, int n, float* y, int threads, bool in_branches, cudaStream_t s) {
  if (in_branches) RT_LAUNCH(1, threads, 0, s, helper_sum_kernel<true>)(x, n, y);
  else RT_LAUNCH(1, threads, 0, s, helper_sum_kernel<false>)(x, n, y);
  CUDA_CHECK_LAUNCH();
}

void block_sum_barrier_in_branch(const float* x, int n, float* y, int threads, cudaStream_t s) {
  RT_LAUNCH(1, threads, 0, s, block_sum_branch_kernel)(x, n, y);
  CUDA_CHECK_LAUNCH();
}

void block_sum_early_return(const float* x, int n, float* y, int threads, cudaStream_t s) {
  RT_LAUNCH(1, threads, 0, s, block_sum_early_return_kernel)(x, n, y);
  CUDA_CHECK_LAUNCH();
}

void pair_sum(const float* x, int64_t n, float* y, bool overread, cudaStream_t s) {
  RT_LAUNCH(3, 64, 0, s, pair_sum_kernel)(x, n, y, overread);
  CUDA_CHECK_LAUNCH();
}

void warp_sums(const float* x, int n, float* y, bool early_exit, cudaStream_t s) {
  RT_LAUNCH((n + 63) / 64, 64, 0, s, warp_sums_kernel)(x, n, y, early_exit);
  CUDA_CHECK_LAUNCH();
}

void scale(const float* x, int64_t n, float* y, int threads, cudaStream_t s) {
  RT_LAUNCH(4, threads, 0, s, scale_kernel)(x, n, y);
  CUDA_CHECK_LAUNCH();
}

void pack_copy(const float* x, int64_t packs, int offset_floats, float* y, cudaStream_t s) {
  RT_LAUNCH(int((packs + 127) / 128), 128, 0, s, pack_copy_kernel)(x + offset_floats, packs, y);
  CUDA_CHECK_LAUNCH();
}

void shared_read(int written, int read_slot, float* y, cudaStream_t s) {
  RT_LAUNCH(1, 64, 0, s, shared_read_kernel)(written, read_slot, y);
  CUDA_CHECK_LAUNCH();
}

void count(int64_t n, unsigned* counter, cudaStream_t s) {
  RT_LAUNCH(int((n + 255) / 256), 256, 0, s, count_kernel)(n, counter);
  CUDA_CHECK_LAUNCH();
}

void count_racy(int64_t n, unsigned* counter, cudaStream_t s) {
  RT_LAUNCH(int((n + 255) / 256), 256, 0, s, count_racy_kernel)(n, counter);
  CUDA_CHECK_LAUNCH();
}

void mul_add_rn(const float* a, const float* b, const float* c, int n, float* y, cudaStream_t s) {
  RT_LAUNCH((n + 63) / 64, 64, 0, s, mul_add_rn_kernel)(a, b, c, n, y);
  CUDA_CHECK_LAUNCH();
}

namespace {
__global__ void local_pick_kernel(int n, float* y) {
  float v[8];
  for (int i = 0; i < 8; ++i) v[i] = float(i) + float(threadIdx.x);
  y[threadIdx.x] = v[int(threadIdx.x) % n];
}
}  // namespace

void local_pick(int n, float* y, cudaStream_t s) {
  RT_LAUNCH(1, 32, 0, s, local_pick_kernel)(n, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rt::emu_test
