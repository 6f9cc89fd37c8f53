// transpose_batched: 32x32 tiles staged through shared memory, so both the reads (along a
// source row) and the writes (along a destination row) are coalesced. The tile has one
// padding column so the column reads of the staged tile hit 32 different banks.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/relayout.h"

namespace rt::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;  // a 32x8 thread block walks the tile in 4 passes

template <typename T>
__global__ void transpose_kernel(int64_t batch, int64_t rows, int64_t cols, const T* __restrict__ src,
                                 T* __restrict__ dst) {
  RT_SHARED(T, tile, [kTile][kTile + 1]);
  const int64_t r0 = int64_t(blockIdx.y) * kTile, k0 = int64_t(blockIdx.x) * kTile;
  for (int64_t n = blockIdx.z; n < batch; n += gridDim.z) {
    const T* s = src + n * rows * cols;
    T* d = dst + n * rows * cols;
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const int64_t r = r0 + i, k = k0 + threadIdx.x;
      if (r < rows && k < cols) tile[i][threadIdx.x] = s[r * cols + k];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const int64_t k = k0 + i, r = r0 + threadIdx.x;
      if (k < cols && r < rows) d[k * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads();  // the tile is refilled for the next image
  }
}

template <typename T>
void launch(int64_t batch, int64_t rows, int64_t cols, const void* src, void* dst, cudaStream_t s) {
  const int64_t gx = (cols + kTile - 1) / kTile, gy = (rows + kTile - 1) / kTile;
  RT_CHECK(gy <= 65535, "transpose_batched: ", rows, " rows exceed the grid limit (", 65535 * kTile, ")");
  RT_CHECK(gx <= (int64_t(1) << 31) - 1, "transpose_batched: ", cols, " columns exceed the grid limit");
  const dim3 grid(unsigned(gx), unsigned(gy), unsigned(std::min<int64_t>(batch, 65535)));
  RT_LAUNCH(grid, dim3(kTile, kRowsPerPass), 0, s, transpose_kernel<T>)(batch, rows, cols, static_cast<const T*>(src),
                                                                 static_cast<T*>(dst));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void transpose_batched(size_t elem_bytes, int64_t batch, int64_t rows, int64_t cols, const void* src, void* dst,
                       cudaStream_t s) {
  RT_CHECK(batch >= 0 && rows >= 0 && cols >= 0, "transpose_batched: negative size");
  if (batch == 0 || rows == 0 || cols == 0) return;
  RT_CHECK(src != dst, "transpose_batched: source and destination must not be the same buffer");
  switch (elem_bytes) {
    case 1: return launch<uint8_t>(batch, rows, cols, src, dst, s);
    case 2: return launch<uint16_t>(batch, rows, cols, src, dst, s);
    case 4: return launch<uint32_t>(batch, rows, cols, src, dst, s);
    case 8: return launch<uint64_t>(batch, rows, cols, src, dst, s);
    default: RT_FAIL("transpose_batched: element size ", elem_bytes, " bytes; expected 1, 2, 4 or 8");
  }
}

}  // namespace rt::cuda
