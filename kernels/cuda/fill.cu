// fill: dst[i] = value for every element, any dtype.
//
// Kernels first, then the launcher. A grid-stride loop: one launch covers any n.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/runtime.h"

namespace rt::cuda {
namespace {

template <typename T>
__global__ void fill_kernel(T* __restrict__ dst, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = value;
}

template <typename T>
void launch_fill(T* dst, int64_t n, T value, cudaStream_t s) {
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  RT_LAUNCH(int(blocks), kThreads, 0, s, fill_kernel<T>)(dst, n, value);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void fill(void* dst, DType dtype, int64_t n, double value, int device, void* stream) {
  RT_CHECK(n >= 0, "fill: negative element count ", n);
  if (n == 0) return;
  CUDA_CHECK(cudaSetDevice(device));
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::f32: return launch_fill(static_cast<float*>(dst), n, float(value), s);
    case DType::f64: return launch_fill(static_cast<double*>(dst), n, value, s);
    case DType::bf16: return launch_fill(static_cast<__nv_bfloat16*>(dst), n, __float2bfloat16(float(value)), s);
    case DType::f16: return launch_fill(static_cast<__half*>(dst), n, __float2half(float(value)), s);
    case DType::i32: return launch_fill(static_cast<int32_t*>(dst), n, int32_t(value), s);
    case DType::i64: return launch_fill(static_cast<int64_t*>(dst), n, int64_t(value), s);
    case DType::u8: return launch_fill(static_cast<uint8_t*>(dst), n, uint8_t(value), s);
  }
  RT_FAIL("fill: unknown dtype");
}

}  // namespace rt::cuda
