// Batch augmentation: elementwise, one thread per element, grid-stride. mix_with_rolled reads
// two images and writes one (memory-bound, coalesced in both formats: an image is C H W
// consecutive elements either way); erase_boxes touches only the erased elements, one block
// row (blockIdx.y) per box.
#include <algorithm>

#include "kernels/cuda/batch_augment.h"
#include "kernels/cuda/common.cuh"

namespace rt::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

template <typename T>
__global__ void mix_kernel(const T* __restrict__ x, int64_t total, int64_t image, int64_t C, int64_t H, int64_t W,
                           bool nhwc, detail::acc_t<T> lam, bool copy, bool whole, int64_t y1, int64_t y2,
                           int64_t x1, int64_t x2, T* __restrict__ y) {
  using A = detail::acc_t<T>;
  const int64_t HW = H * W;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    if (!whole) {  // mixup's box is the image: no index arithmetic
      const int64_t e = i % image;  // offset inside the image
      const int64_t p = nhwc ? e / C : e % HW;
      const int64_t h = p / W, w = p % W;
      if (h < y1 || h >= y2 || w < x1 || w >= x2) {
        y[i] = x[i];
        continue;
      }
    }
    const int64_t r = i >= image ? i - image : i + (total - image);  // image n - 1, image N - 1 for n = 0
    y[i] = copy ? x[r] : detail::from_acc<T>(lam * detail::to_acc(x[i]) + (A(1) - lam) * detail::to_acc(x[r]));
  }
}

template <typename T>
__global__ void mix_targets_kernel(const int64_t* __restrict__ labels, int64_t N, int64_t K, detail::acc_t<T> lam,
                                   T* __restrict__ out) {
  using A = detail::acc_t<T>;
  const int64_t total = N * K;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / K, k = i % K;
    const int64_t l = labels[n], lp = labels[n == 0 ? N - 1 : n - 1];
    A v;
    if (l < 0 || l >= K || lp < 0 || lp >= K) {
      v = A(NAN);
    } else {
      const A a = k == l ? lam : A(0), b = k == lp ? A(1) - lam : A(0);
      v = a + b;
    }
    out[i] = detail::from_acc<T>(v);
  }
}

struct EraseSlot {
  int32_t n, y1, h, x1, w;  // image; first row, rows; first column, columns
};
struct EraseBatch {
  EraseSlot b[kMaxBoxesPerLaunch];
  double value;
};
static_assert(sizeof(EraseBatch) < 4000, "kernel parameters are limited to 4 KiB");

template <typename T>
__global__ void erase_kernel(T* __restrict__ x, int64_t C, int64_t H, int64_t W, bool nhwc, EraseBatch eb) {
  const EraseSlot s = eb.b[blockIdx.y];
  const T v = detail::from_acc<T>(detail::acc_t<T>(eb.value));
  const int64_t count = int64_t(s.h) * s.w * C;
  T* img = x + int64_t(s.n) * C * H * W;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < count; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t off;
    if (nhwc) {  // e = (i * w + j) * C + c
      const int64_t c = e % C, q = e / C;
      off = ((s.y1 + q / s.w) * W + s.x1 + q % s.w) * C + c;
    } else {  // e = (c * h + i) * w + j
      const int64_t j = e % s.w, q = e / s.w;
      off = ((q / s.h) * H + s.y1 + q % s.h) * W + s.x1 + j;
    }
    img[off] = v;
  }
}

// ---- launchers -------------------------------------------------------------------------

constexpr int kThreads = 256;

}  // namespace

void mix_with_rolled(DType t, const void* x, int64_t N, int64_t C, int64_t H, int64_t W, bool nhwc, double lam,
                     int64_t y1, int64_t y2, int64_t x1, int64_t x2, void* y, cudaStream_t s) {
  const int64_t image = C * H * W, total = N * image;
  if (total == 0) return;
  const bool whole = y1 <= 0 && y2 >= H && x1 <= 0 && x2 >= W;
  detail::dispatch_floating(t, "mix_with_rolled", [&](auto z) {
    using T = decltype(z);
    using A = detail::acc_t<T>;
    RT_LAUNCH(detail::grid_for(total, kThreads), kThreads, 0, s, mix_kernel<T>)(
        static_cast<const T*>(x), total, image, C, H, W, nhwc, A(lam), lam == 0.0, whole, y1, y2, x1, x2,
        static_cast<T*>(y));
    CUDA_CHECK_LAUNCH();
  });
}

void mix_targets(DType t, const int64_t* labels, int64_t N, int64_t K, double lam, void* out, cudaStream_t s) {
  if (N * K == 0) return;
  detail::dispatch_floating(t, "mix_targets", [&](auto z) {
    using T = decltype(z);
    using A = detail::acc_t<T>;
    RT_LAUNCH(detail::grid_for(N * K, kThreads), kThreads, 0, s, mix_targets_kernel<T>)(labels, N, K, A(lam),
                                                                                         static_cast<T*>(out));
    CUDA_CHECK_LAUNCH();
  });
}

void erase_boxes(DType t, void* x, int64_t N, int64_t C, int64_t H, int64_t W, bool nhwc, const int64_t* boxes,
                 double value, cudaStream_t s) {
  RT_CHECK(H < (int64_t(1) << 31) && W < (int64_t(1) << 31), "erase_boxes: image ", H, " x ", W, " too large");
  detail::dispatch_floating(t, "erase_boxes", [&](auto z) {
    using T = decltype(z);
    EraseBatch eb{};
    eb.value = value;
    int k = 0;
    int64_t max_count = 0;
    const auto launch = [&] {
      if (k == 0 || max_count == 0) return;
      const dim3 grid(unsigned(detail::grid_for(max_count, kThreads)), unsigned(k));
      RT_LAUNCH(grid, kThreads, 0, s, erase_kernel<T>)(static_cast<T*>(x), C, H, W, nhwc, eb);
      CUDA_CHECK_LAUNCH();
      k = 0;
      max_count = 0;
    };
    for (int64_t n = 0; n < N; ++n) {
      const int64_t* b = boxes + 4 * n;  // y1, y2, x1, x2, clipped to the image
      const int64_t y1 = std::max<int64_t>(b[0], 0), y2 = std::min(b[1], H);
      const int64_t x1 = std::max<int64_t>(b[2], 0), x2 = std::min(b[3], W);
      if (y2 <= y1 || x2 <= x1 || C == 0) continue;
      eb.b[k++] = {int32_t(n), int32_t(y1), int32_t(y2 - y1), int32_t(x1), int32_t(x2 - x1)};
      max_count = std::max(max_count, (y2 - y1) * (x2 - x1) * C);
      if (k == kMaxBoxesPerLaunch) launch();
    }
    launch();
  });
}

}  // namespace rt::cuda
