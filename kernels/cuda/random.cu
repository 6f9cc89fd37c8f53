// Random fills: one thread per output element, grid-stride over memory order (coalesced
// writes); each element computes its logical index, and from it its own draws, so the
// result does not depend on the grid or on the order threads run in.
//
// Note [same values as the host]
// Every step is the host's (engine/random.cc) with the rounding spelled out, so nvcc can
// neither fuse nor reorder: the integer draws are equal by construction; u, 1 - u and the
// scalings by 2 are exact; sqrt is correctly rounded on both sides; the affine map is one
// fma on both sides (the host writes std::fma). Only log and cos differ: glibc's against
// CUDA's (within 1 and 2 ulp), so normal values in double can differ in their last bits;
// after rounding to f32/bf16/f16 they almost always agree (tests/cuda/random_cuda_test.cc
// states the tolerance). Uniform and int fills are bit-identical.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/random.h"

namespace rt::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

// splitmix64: the constants of Generator::next_u64 (engine/random.cc). Draw k after state
// s is the (k + 1)-th increment of s, mod 2^64 like the host's unsigned state.
constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;

__device__ __forceinline__ uint64_t draw(uint64_t state, uint64_t k) {
  uint64_t z = state + (k + 1) * kGamma;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Generator::uniform: the top 53 bits times 2^-53, in [0, 1) (both steps exact).
__device__ __forceinline__ double uniform(uint64_t state, uint64_t k) {
  return __dmul_rn(__ull2double_rn(draw(state, k) >> 11), 0x1.0p-53);
}

// 2 pi rounded once, as the host's constant-folded 2.0 * M_PI.
constexpr double kTwoPi = 2.0 * M_PI;

// Generator::normal from draws k (u1) and k + 1 (u2): Box-Muller, the cosine branch only.
__device__ __forceinline__ double normal(uint64_t state, uint64_t k) {
  const double u1 = __dsub_rn(1.0, uniform(state, k));  // (0, 1]
  const double u2 = uniform(state, k + 1);
  return __dmul_rn(__dsqrt_rn(__dmul_rn(-2.0, log(u1))), cos(__dmul_rn(kTwoPi, u2)));
}

// Logical (row-major N, C, H, W) index of the element at NHWC offset j.
__device__ __forceinline__ int64_t nchw_index(int64_t j, int64_t C, int64_t H, int64_t W) {
  const int64_t c = j % C, p = j / C;  // p = (n * H + h) * W + w
  const int64_t w = p % W, q = p / W;
  const int64_t h = q % H, n = q / H;
  return ((n * C + c) * H + h) * W + w;
}

enum class Dist { uniform, normal };

// y[j] = T(fma(scale, x_i, shift)), i the logical index of memory offset j, x_i the
// element's uniform (draw i) or normal (draws 2i, 2i + 1). Rounded to T once from double
// (bf16/f16 through float, like the host's f32 buffer converted by Tensor::to).
template <Dist D, typename T>
__global__ void random_kernel(uint64_t state, int64_t total, int64_t C, int64_t H, int64_t W, bool nhwc,
                              double scale, double shift, T* __restrict__ y) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total; j += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t i = uint64_t(nhwc ? nchw_index(j, C, H, W) : j);
    const double x = D == Dist::normal ? normal(state, 2 * i) : uniform(state, i);
    y[j] = detail::from_acc<T>(detail::acc_t<T>(fma(scale, x, shift)));
  }
}

// y[i] = lo + draw i % range, in unsigned arithmetic (the result lies in [lo, hi)).
__global__ void random_int_kernel(uint64_t state, int64_t n, uint64_t lo, uint64_t range, int64_t* __restrict__ y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = int64_t(lo + draw(state, uint64_t(i)) % range);
}

// ---- launchers -------------------------------------------------------------------------

constexpr int kThreads = 256;

// The element count of a floating fill, after the host-side checks (no CUDA call before).
int64_t checked_numel(const char* op, const RandomLayout& at, DType dtype, const void* y) {
  RT_CHECK(at.N >= 0 && at.C >= 0 && at.H >= 0 && at.W >= 0, op, ": negative extent (", at.N, ", ", at.C, ", ",
           at.H, ", ", at.W, ")");
  RT_CHECK(is_floating(dtype), op, ": the CUDA fill writes f32, f64, bf16 or f16, got ", dtype_name(dtype));
  const int64_t n = at.N * at.C * at.H * at.W;
  RT_CHECK(n == 0 || y != nullptr, op, ": null output for ", n, " elements");
  RT_CHECK(reinterpret_cast<uintptr_t>(y) % dtype_size(dtype) == 0, op, ": output ", y, " is not aligned to ",
           dtype_size(dtype), "-byte ", dtype_name(dtype), " elements");
  return n;
}

template <Dist D>
void launch_random(const char* op, uint64_t state, const RandomLayout& at, double scale, double shift, DType dtype,
                   void* y, cudaStream_t s) {
  const int64_t n = checked_numel(op, at, dtype, y);
  if (n == 0) return;
  detail::dispatch_floating(dtype, op, [&](auto z) {
    using T = decltype(z);
    RT_LAUNCH(detail::grid_for(n, kThreads), kThreads, 0, s, random_kernel<D, T>)(
        state, n, at.C, at.H, at.W, at.channels_last, scale, shift, static_cast<T*>(y));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void random_uniform(uint64_t state, const RandomLayout& at, double lo, double hi, DType dtype, void* y,
                    cudaStream_t s) {
  launch_random<Dist::uniform>("rand_uniform", state, at, hi - lo, lo, dtype, y, s);
}

void random_normal(uint64_t state, const RandomLayout& at, double mean, double std, DType dtype, void* y,
                   cudaStream_t s) {
  launch_random<Dist::normal>("randn", state, at, std, mean, dtype, y, s);
}

void random_int(uint64_t state, int64_t n, int64_t lo, int64_t hi, int64_t* y, cudaStream_t s) {
  RT_CHECK(n >= 0, "randint: negative element count ", n);
  RT_CHECK(hi > lo, "randint: empty range [", lo, ", ", hi, ")");
  RT_CHECK(n == 0 || y != nullptr, "randint: null output for ", n, " elements");
  RT_CHECK(reinterpret_cast<uintptr_t>(y) % sizeof(int64_t) == 0, "randint: output ", static_cast<void*>(y),
           " is not aligned to 8-byte i64 elements");
  if (n == 0) return;
  RT_LAUNCH(detail::grid_for(n, kThreads), kThreads, 0, s, random_int_kernel)(state, n, uint64_t(lo),
                                                                       uint64_t(hi) - uint64_t(lo), y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rt::cuda
