// normalize_pixels: one thread per output element, grid-stride. Reads are bytes (the
// input is a quarter of the f32 output), so the kernel is bound by its writes; with NHWC
// output both sides are contiguous, with NCHW output consecutive threads write
// consecutive w of one plane (coalesced) and read with a stride of C bytes.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/normalize_pixels.h"

namespace rt::cuda {
namespace {

// Per-channel constants, passed by value (kernel parameter space: no copy, no allocation).
template <typename A>
struct Affine {
  A scale[kMaxPixelChannels];
  A bias[kMaxPixelChannels];
};

__device__ __forceinline__ float fma_acc(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fma_acc(double a, double b, double c) { return fma(a, b, c); }

template <typename T>
__global__ void normalize_pixels_kernel(const uint8_t* __restrict__ x, int64_t total, int64_t HW, int C,
                                        Affine<detail::acc_t<T>> k, bool nhwc_out, T* __restrict__ y) {
  using A = detail::acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int c;
    int64_t src;
    if (nhwc_out) {
      c = int(i % C);
      src = i;
    } else {  // i = (n * C + c) * HW + p
      const int64_t p = i % HW, nc = i / HW;
      c = int(nc % C);
      src = ((nc / C) * HW + p) * C + c;
    }
    y[i] = detail::from_acc<T>(fma_acc(A(x[src]), k.scale[c], k.bias[c]));
  }
}

constexpr int kThreads = 256;

}  // namespace

void normalize_pixels(const uint8_t* x, int64_t N, int64_t H, int64_t W, int64_t C, const double* scale,
                      const double* bias, bool nhwc_out, DType out, void* y, cudaStream_t s) {
  RT_CHECK(C >= 1 && C <= kMaxPixelChannels, "normalize_pixels: ", C, " channels; the CUDA kernel takes 1 to ",
           kMaxPixelChannels);
  RT_CHECK(N >= 0 && H >= 0 && W >= 0, "normalize_pixels: negative size");
  const int64_t total = N * H * W * C;
  if (total == 0) return;
  detail::dispatch_floating(out, "normalize_pixels", [&](auto z) {
    using T = decltype(z);
    using A = detail::acc_t<T>;
    Affine<A> k{};
    // Rounded to the compute type on the host, as the CPU kernel does (same bits).
    for (int64_t c = 0; c < C; ++c) {
      k.scale[c] = A(scale[c]);
      k.bias[c] = A(bias[c]);
    }
    RT_LAUNCH(detail::grid_for(total, kThreads), kThreads, 0, s, normalize_pixels_kernel<T>)(
        x, total, H * W, int(C), k, nhwc_out, static_cast<T*>(y));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace rt::cuda
