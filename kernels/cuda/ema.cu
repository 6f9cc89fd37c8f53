// torchvision's model EMA over a list of tensors (optim/ema.h), fused: one launch per dtype
// for up to kEmaTensorsPerLaunch tensors.
//
// Bit-exact with the CPU loop in optim/ema.cc, as the optimizers are with theirs
// (Note [Bit-exact updates on the GPU] in optim.cu): every multiply and add is a
// round-to-nearest intrinsic, which nvcc never contracts into an FMA, in the CPU's order
// (Note [EMA rounding] in optim/ema.h); the scalars come from the host in double and are
// rounded to the compute type once. For i64 tensors the conversions are plain casts:
// int64 -> float rounds to nearest (cvt.rn), float -> int64 truncates (cvt.rzi), as
// static_cast does on the CPU.
//
// Launch shape: grid.y indexes the tensors of one launch (their pointers in the parameter
// block), grid.x strides over the elements of each; blocks beyond a small tensor's end exit
// at once.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ema.cuh"

namespace rt::cuda {
namespace {

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

struct EmaSlot {
  void* avg;
  const void* p;
  int64_t n;
};
struct EmaBatch {
  EmaSlot t[kEmaTensorsPerLaunch];
  double decay, one_minus_decay;
  int copy;
};
static_assert(sizeof(EmaBatch) < 4000, "kernel parameters are limited to 4 KiB");

// T: the storage type; C: the compute type (T for f32/f64, float for i64).
template <typename T, typename C>
__global__ void ema_kernel(EmaBatch b) {
  const EmaSlot& s = b.t[blockIdx.y];
  T* avg = static_cast<T*>(s.avg);       // (n,)
  const T* p = static_cast<const T*>(s.p);  // (n,)
  const C decay = C(b.decay), one_minus_decay = C(b.one_minus_decay);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < s.n; i += int64_t(gridDim.x) * blockDim.x) {
    if (b.copy) {
      avg[i] = p[i];
      continue;
    }
    const C kept = mul_rn(decay, C(avg[i]));      // decay * avg
    const C taken = mul_rn(one_minus_decay, C(p[i]));  // (1 - decay) * p
    avg[i] = T(add_rn(kept, taken));
  }
}

constexpr int kThreads = 256;
constexpr int kMaxBlocksX = 1024;

}  // namespace

void ema_update(DType t, const std::vector<EmaTensor>& list, double decay, bool copy, cudaStream_t s) {
  RT_CHECK(t == DType::f32 || t == DType::f64 || t == DType::i64, "ema_update: tensors must be f32, f64 or i64, got ",
           dtype_name(t));
  RT_CHECK(std::isfinite(decay), "ema_update: decay must be finite, got ", decay);
  for (const EmaTensor& e : list) {
    RT_CHECK(e.n >= 0, "ema_update: negative element count ", e.n);
    RT_CHECK(e.n == 0 || (e.avg && e.p), "ema_update: null pointer");
  }
  EmaBatch b{};
  b.decay = decay;
  b.one_minus_decay = 1.0 - decay;  // Python's (1 - decay), in double
  b.copy = copy;
  for (size_t first = 0; first < list.size(); first += kEmaTensorsPerLaunch) {
    const size_t k = std::min<size_t>(kEmaTensorsPerLaunch, list.size() - first);
    int64_t max_n = 0;
    for (size_t j = 0; j < k; ++j) {
      const EmaTensor& e = list[first + j];
      b.t[j] = EmaSlot{e.avg, e.p, e.n};
      max_n = std::max(max_n, e.n);
    }
    if (max_n == 0) continue;
    const dim3 grid(std::min(detail::grid_for(max_n, kThreads), kMaxBlocksX), unsigned(k));
    if (t == DType::f32) RT_LAUNCH(grid, kThreads, 0, s, ema_kernel<float, float>)(b);
    else if (t == DType::f64) RT_LAUNCH(grid, kThreads, 0, s, ema_kernel<double, double>)(b);
    else RT_LAUNCH(grid, kThreads, 0, s, ema_kernel<int64_t, float>)(b);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace rt::cuda
