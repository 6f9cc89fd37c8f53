// The kernels of kernel_lab.h: memory patterns whose Nsight Compute counters are known
// exactly (kernel_lab_test.cc states them).
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.cuh"
#include "tests/cuda_emu/kernel_lab.h"

namespace rt::emu_test::lab {
namespace {

__global__ void copy_kernel(const float* x, float* y, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = x[i];
}

__global__ void strided_copy_kernel(const float* x, float* y, int n, int stride) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = x[int64_t(i) * stride];
}

template <int kPad>
__global__ void transpose32_kernel(const float* x, float* y) {
  RT_SHARED(float, tile, [32][32 + kPad]);
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  tile[ty][tx] = x[ty * 32 + tx];
  __syncthreads();
  y[ty * 32 + tx] = tile[tx][ty];
}

__global__ void half_warp_kernel(const float* x, float* y, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (threadIdx.x % 32 < 16 && i < n) y[i] = x[i];
}

__global__ void broadcast_kernel(const float* x, float* y) {
  RT_SHARED(float, s, [1]);
  if (threadIdx.x == 0) s[0] = x[0];
  __syncthreads();
  y[threadIdx.x] = s[0];
}

// 96 values live across a chain of dependent updates: nvcc keeps them in registers.
__global__ void register_heavy_kernel(const float* x, float* y, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  float v[96];
  RT_UNROLL for (int k = 0; k < 96; ++k) v[k] = x[(i + 97 * k) % n];
  RT_UNROLL for (int r = 0; r < 6; ++r) {
    RT_UNROLL for (int k = 0; k < 96; ++k) v[k] = v[k] * v[(k + 7) % 96] + v[(k + 13) % 96];
  }
  float s = 0;
  RT_UNROLL for (int k = 0; k < 96; ++k) s += v[k] * float(k + 1);
  y[i] = s;
}

template <typename V>
__global__ void vector_copy_kernel(const V* x, V* y, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = x[i];
}

template <typename V, int kStride>
__global__ void shared_vectors_kernel(const V* x, V* y) {
  RT_SHARED(V, s, [32 * kStride]);
  const int l = int(threadIdx.x);
  s[l * kStride] = x[l];
  __syncthreads();
  y[l] = s[l * kStride];
}

__global__ void atomic_count_kernel(float* counter) { atomicAdd(counter, 1.0f); }

template <typename T>
__global__ void deduced_copy_kernel(const T* x, T* y, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = x[i];
}

int blocks(int n, int threads) { return (n + threads - 1) / threads; }

}  // namespace

void copy(const float* x, float* y, int n) {
  RT_LAUNCH(blocks(n, 128), 128, 0, nullptr, copy_kernel)(x, y, n);
  CUDA_CHECK_LAUNCH();
}

void strided_copy(const float* x, float* y, int n, int stride) {
  RT_LAUNCH(blocks(n, 128), 128, 0, nullptr, strided_copy_kernel)(x, y, n, stride);
  CUDA_CHECK_LAUNCH();
}

void transpose32(const float* x, float* y, bool padded) {
  if (padded) RT_LAUNCH(1, dim3(32, 32), 0, nullptr, transpose32_kernel<1>)(x, y);
  else RT_LAUNCH(1, dim3(32, 32), 0, nullptr, transpose32_kernel<0>)(x, y);
  CUDA_CHECK_LAUNCH();
}

void half_warp_copy(const float* x, float* y, int n) {
  RT_LAUNCH(blocks(n, 128), 128, 0, nullptr, half_warp_kernel)(x, y, n);
  CUDA_CHECK_LAUNCH();
}

void broadcast(const float* x, float* y) {
  RT_LAUNCH(1, 32, 0, nullptr, broadcast_kernel)(x, y);
  CUDA_CHECK_LAUNCH();
}

void register_heavy(const float* x, float* y, int n) {
  RT_LAUNCH(blocks(n, 256), 256, 0, nullptr, register_heavy_kernel)(x, y, n);
  CUDA_CHECK_LAUNCH();
}

void vector_copy(const float* x, float* y, int n, int width) {
  if (width == 2)
    RT_LAUNCH(blocks(n, 128), 128, 0, nullptr, vector_copy_kernel<float2>)(reinterpret_cast<const float2*>(x),
                                                                          reinterpret_cast<float2*>(y), n);
  else
    RT_LAUNCH(blocks(n, 128), 128, 0, nullptr, vector_copy_kernel<float4>)(reinterpret_cast<const float4*>(x),
                                                                          reinterpret_cast<float4*>(y), n);
  CUDA_CHECK_LAUNCH();
}

void shared_vectors(const float* x, float* y, int width, int stride) {
  const auto* x2 = reinterpret_cast<const float2*>(x);
  const auto* x4 = reinterpret_cast<const float4*>(x);
  auto* y2 = reinterpret_cast<float2*>(y);
  auto* y4 = reinterpret_cast<float4*>(y);
  if (width == 2 && stride == 1) RT_LAUNCH(1, 32, 0, nullptr, shared_vectors_kernel<float2, 1>)(x2, y2);
  else if (width == 2) RT_LAUNCH(1, 32, 0, nullptr, shared_vectors_kernel<float2, 2>)(x2, y2);
  else if (stride == 1) RT_LAUNCH(1, 32, 0, nullptr, shared_vectors_kernel<float4, 1>)(x4, y4);
  else RT_LAUNCH(1, 32, 0, nullptr, shared_vectors_kernel<float4, 2>)(x4, y4);
  CUDA_CHECK_LAUNCH();
}

void atomic_count(float* counter) {
  RT_LAUNCH(1, 64, 0, nullptr, atomic_count_kernel)(counter);
  CUDA_CHECK_LAUNCH();
}

void deduced_copy(const float* x, float* y, int n) {
  RT_LAUNCH(blocks(n, 128), 128, 0, nullptr, deduced_copy_kernel)(x, y, n);  // T deduced from the call
  CUDA_CHECK_LAUNCH();
}

void hinted_copy(const float* x, float* y, int n) {
  rt::cuda::flops_hint(3.0 * n);
  RT_LAUNCH(blocks(n, 128), 128, 0, nullptr, copy_kernel)(x, y, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rt::emu_test::lab
