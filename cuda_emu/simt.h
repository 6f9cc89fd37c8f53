// The device side of CUDA for the host compiler (--config=cuda-emu, docs/cuda-on-cpu.md):
// force-included first in every .cu file compiled as C++. It provides what nvcc provides
// inside kernels: the built-ins (threadIdx, blockIdx, blockDim, gridDim, warpSize), block
// barriers, warp shuffles/votes, atomics, the exactly-rounded _rn intrinsics, shared memory
// (RT_SHARED) and kernel launches (RT_LAUNCH). The executor (cuda_emu/executor.cc) runs
// every GPU thread of a block as a fiber; the functions declared here are its entry points.
//
// Note [The __shared__ trap]
// The toolkit headers define __shared__ as nothing for a host compiler, so
// `__shared__ float buf[256];` would silently become one array per thread and every block
// reduction would compute garbage without an error. Here __shared__ is defined (before the
// toolkit headers, which then keep it) as a name that fails to compile and says what to
// write instead: RT_SHARED(T, name, [dims]).
#pragma once

#if defined(__CUDACC__)
#error "cuda_emu/simt.h is for the host compiler (--config=cuda-emu), not for nvcc"
#endif

#define RINGTAPE_CUDA_EMU_DEVICE 1
#undef __shared__
#define __shared__ error_under_cuda_emu__declare_shared_memory_with_RT_SHARED  // Note [The __shared__ trap]

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <utility>

namespace rt::emu {

// ---- built-ins of the GPU thread being run -------------------------------------------------
uint3 thread_idx() noexcept;
uint3 block_idx() noexcept;
dim3 block_dim() noexcept;
dim3 grid_dim() noexcept;

// ---- synchronisation ------------------------------------------------------------------------
void sync_block(const std::source_location& where);

enum class WarpOp { sync, shfl, shfl_up, shfl_down, shfl_xor, ballot, any, all };
// One warp-level operation of the calling lane: every lane named in `mask` must take part
// (Note [Warp operations] in executor.cc). Shuffles move `bytes` (at most 16) from `in` of
// the source lane to `out`; votes return the ballot.
unsigned warp_op(WarpOp op, unsigned mask, const void* in, void* out, size_t bytes, int arg, int width,
                 const std::source_location& where);

// ---- memory -----------------------------------------------------------------------------------
// The block's shared arena: the static array declared at `site` (one per declaration and
// template instance), or the dynamic part of the launch.
void* shared_static(const void* site, size_t bytes, size_t align);
void* shared_dynamic() noexcept;

enum class AtomicOp { add, sub, min, max, exch, cas, bit_and, bit_or, bit_xor, inc, dec };
// Applies `op` atomically to the `bytes`-byte value at p (checked like any device access,
// not counted as a race); returns the old value in `old`.
void atomic_rmw(AtomicOp op, void* p, size_t bytes, bool is_float, bool is_signed, const void* operand,
                const void* compare, void* old);

// ---- launches ---------------------------------------------------------------------------------
struct LaunchSite {
  const char* kernel = nullptr;  // as written at the launch, template arguments included
  const char* file = nullptr;
  int line = 0;
  const char* pretty = nullptr;  // GCC's __PRETTY_FUNCTION__ of instance_name<&kernel>: the instantiated name
  const void* entry = nullptr;   // else the kernel function itself (its symbol names it), or null
  const char* args = nullptr;    // __PRETTY_FUNCTION__ of argument_types<A...>: the launch's argument types
  int instantiation = -1;        // its index among the program's (register_instantiation)
};

// The kernel's instantiated name, e.g. "rt::cuda::transpose_kernel<unsigned int>" where the
// launch wrote transpose_kernel<T> (the lab's records, Note [Kernel lab] in perf.cc): the
// function &kernel names when the launch gives every template argument. Otherwise the
// kernel's template arguments are deduced from the call (as <<<>>> does; GCC then prints
// the argument unresolved, "(& kernel)"): the function taking the launch's argument types as
// they are (kernels take their parameters by value) is the launch's entry, named by its
// symbol when the records are written. A kernel that is neither (its deduced parameters
// converted at the call) is named as written.
template <auto Kernel>
const char* instance_name() {
  return __PRETTY_FUNCTION__;
}
template <typename... A>
const char* argument_types() {
  return __PRETTY_FUNCTION__;
}

// Every kernel instantiation compiled into the program, one per RT_LAUNCH site and argument
// types, is registered before main (Note [Kernel coverage] in cuda_emu/coverage.cc); returns
// its index. `Namer` (RT_LAUNCH) names the site.
int register_instantiation(const LaunchSite& site) noexcept;
template <typename Namer, typename... A>
struct Instantiation {
  static LaunchSite named() {
    LaunchSite s;
    Namer{}(s, std::type_identity<A>{}...);
    s.args = argument_types<A...>();
    s.instantiation = register_instantiation(s);
    return s;
  }
  static inline const LaunchSite site = named();  // dynamic initialisation: before main
};

// ptxas's resource report of one translation unit's kernels (nvcc -arch=sm_90
// --resource-usage): tools/cuda.bzl appends one to every .cu file compiled under
// --config=cuda-emu, so the registers, shared memory and spills of every kernel the
// emulator runs are known (cuda_emu/ptxas.h).
void register_ptxas_report(const char* source, const char* text) noexcept;
struct PtxasReport {
  PtxasReport(const char* source, const char* text) noexcept { register_ptxas_report(source, text); }
};

// The floating-point operations of the next kernel this host thread launches, for the
// kernel lab's roofline (kernels/cuda/launch.cuh: rt::cuda::flops_hint). `f64`: counted
// against the FP64 peak instead of FP32's.
void next_launch_flops(double flops, bool f64) noexcept;
using KernelEntry = void (*)(const void* args);
// Queues the kernel on `stream`: `entry(args)` runs once per GPU thread. Configuration
// errors set the error cudaGetLastError returns, as a real launch does.
void launch(dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream, const LaunchSite& site,
            KernelEntry entry, std::shared_ptr<const void> args, size_t args_bytes);

// RT_LAUNCH(...)(args...): the arguments are copied once at the launch, as CUDA copies
// them to parameter memory, and each GPU thread calls the kernel with them.
// `Namer{}(site, std::type_identity<A>{}...)` names the launch site and the instantiation for
// arguments of types A (RT_LAUNCH, instance_name), once per program (Instantiation).
template <typename Body, typename Namer>
class Launcher {
 public:
  Launcher(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Body body, Namer)
      : grid_(grid), block_(block), smem_(smem), stream_(stream), body_(body) {}

  template <typename... A>
  void operator()(A&&... a) const {
    using Args = std::tuple<std::decay_t<A>...>;
    auto args = std::make_shared<const Args>(std::forward<A>(a)...);
    launch(grid_, block_, smem_, stream_, Instantiation<Namer, std::decay_t<A>...>::site, &entry<Args>, args,
           sizeof(Args));
  }

 private:
  template <typename Args>
  static void entry(const void* p) {
    std::apply([](const auto&... x) { Body{}(x...); }, *static_cast<const Args*>(p));
  }
  dim3 grid_, block_;
  size_t smem_;
  cudaStream_t stream_;
  Body body_;
};

template <typename T>
T bits_as(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace rt::emu

// ---- the names kernels use ----------------------------------------------------------------------
inline constexpr int warpSize = 32;
#define __launch_bounds__(...)
// Device code calls the classification functions unqualified, as C does.
using std::isfinite;
using std::isinf;
using std::isnan;
#define threadIdx (::rt::emu::thread_idx())
#define blockIdx (::rt::emu::block_idx())
#define blockDim (::rt::emu::block_dim())
#define gridDim (::rt::emu::grid_dim())

// `kernel<<<grid, block, smem, stream>>>(args...)` is written
// `RT_LAUNCH(grid, block, smem, stream, kernel)(args...)` (kernels/cuda/launch.cuh).
#define RT_LAUNCH(grid, block, smem, stream, ...)                                                     \
  ::rt::emu::Launcher(                                                                               \
      dim3(grid), dim3(block), size_t(smem), (stream),                                               \
      [](const auto&... rt_emu_args) { __VA_ARGS__(rt_emu_args...); },                               \
      [](::rt::emu::LaunchSite& rt_emu_site, auto... rt_emu_types) {                                 \
        rt_emu_site.kernel = #__VA_ARGS__;                                                           \
        rt_emu_site.file = __FILE__;                                                                 \
        rt_emu_site.line = __LINE__;                                                                 \
        if constexpr (requires { ::rt::emu::instance_name<&__VA_ARGS__>(); })                        \
          rt_emu_site.pretty = ::rt::emu::instance_name<&__VA_ARGS__>();                             \
        if constexpr (requires {                                                                     \
                        static_cast<void (*)(typename decltype(rt_emu_types)::type...)>(&__VA_ARGS__); \
                      })                                                                             \
          rt_emu_site.entry = reinterpret_cast<const void*>(                                         \
              static_cast<void (*)(typename decltype(rt_emu_types)::type...)>(&__VA_ARGS__));        \
      })

// `__shared__ T name[d1][d2];` is written `RT_SHARED(T, name, [d1][d2]);`.
#define RT_SHARED(T, name, dims)     \
  static const char name##_rt_site_ = 0; \
  T(&name) dims = *static_cast<T(*) dims>(::rt::emu::shared_static(&name##_rt_site_, sizeof(T dims), alignof(T dims)))
// `extern __shared__ T name[];` is written `RT_SHARED_DYNAMIC(T, name);`.
#define RT_SHARED_DYNAMIC(T, name) T* name = static_cast<T*>(::rt::emu::shared_dynamic())
// `#pragma unroll` is written RT_UNROLL (host compilers warn on nvcc's pragma).
#define RT_UNROLL

inline void __syncthreads(const std::source_location& w = std::source_location::current()) {
  ::rt::emu::sync_block(w);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const std::source_location& w = std::source_location::current()) {
  ::rt::emu::warp_op(::rt::emu::WarpOp::sync, mask, nullptr, nullptr, 0, 0, 32, w);
}

namespace rt::emu {
template <typename T>
T shuffle(WarpOp op, unsigned mask, T v, int arg, int width, const std::source_location& w) {
  static_assert(sizeof(T) <= 16 && std::is_trivially_copyable_v<T>, "shuffles move up to 16 bytes");
  T out;
  warp_op(op, mask, &v, &out, sizeof(T), arg, width, w);
  return out;
}
}  // namespace rt::emu

template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32, const std::source_location& w = std::source_location::current()) {
  return ::rt::emu::shuffle(::rt::emu::WarpOp::shfl, mask, v, src, width, w);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32,
                 const std::source_location& w = std::source_location::current()) {
  return ::rt::emu::shuffle(::rt::emu::WarpOp::shfl_up, mask, v, int(delta), width, w);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32,
                   const std::source_location& w = std::source_location::current()) {
  return ::rt::emu::shuffle(::rt::emu::WarpOp::shfl_down, mask, v, int(delta), width, w);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                  const std::source_location& w = std::source_location::current()) {
  return ::rt::emu::shuffle(::rt::emu::WarpOp::shfl_xor, mask, v, lane_mask, width, w);
}
inline unsigned __ballot_sync(unsigned mask, int pred, const std::source_location& w = std::source_location::current()) {
  const int p = pred != 0;
  return ::rt::emu::warp_op(::rt::emu::WarpOp::ballot, mask, &p, nullptr, sizeof(p), 0, 32, w);
}
inline int __any_sync(unsigned mask, int pred, const std::source_location& w = std::source_location::current()) {
  const int p = pred != 0;
  return int(::rt::emu::warp_op(::rt::emu::WarpOp::any, mask, &p, nullptr, sizeof(p), 0, 32, w));
}
inline int __all_sync(unsigned mask, int pred, const std::source_location& w = std::source_location::current()) {
  const int p = pred != 0;
  return int(::rt::emu::warp_op(::rt::emu::WarpOp::all, mask, &p, nullptr, sizeof(p), 0, 32, w));
}

// ---- atomics ---------------------------------------------------------------------------------
namespace rt::emu {
template <typename T>
T atomic(AtomicOp op, T* p, T v, T compare = T{}) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics on 4- and 8-byte values");
  T old;
  atomic_rmw(op, p, sizeof(T), std::is_floating_point_v<T>, std::is_signed_v<T>, &v, &compare, &old);
  return old;
}
}  // namespace rt::emu
template <typename T> T atomicAdd(T* p, T v) { return ::rt::emu::atomic(::rt::emu::AtomicOp::add, p, v); }
template <typename T> T atomicSub(T* p, T v) { return ::rt::emu::atomic(::rt::emu::AtomicOp::sub, p, v); }
template <typename T> T atomicMin(T* p, T v) { return ::rt::emu::atomic(::rt::emu::AtomicOp::min, p, v); }
template <typename T> T atomicMax(T* p, T v) { return ::rt::emu::atomic(::rt::emu::AtomicOp::max, p, v); }
template <typename T> T atomicExch(T* p, T v) { return ::rt::emu::atomic(::rt::emu::AtomicOp::exch, p, v); }
template <typename T> T atomicAnd(T* p, T v) { return ::rt::emu::atomic(::rt::emu::AtomicOp::bit_and, p, v); }
template <typename T> T atomicOr(T* p, T v) { return ::rt::emu::atomic(::rt::emu::AtomicOp::bit_or, p, v); }
template <typename T> T atomicXor(T* p, T v) { return ::rt::emu::atomic(::rt::emu::AtomicOp::bit_xor, p, v); }
template <typename T> T atomicCAS(T* p, T compare, T v) { return ::rt::emu::atomic(::rt::emu::AtomicOp::cas, p, v, compare); }

// ---- exactly rounded arithmetic ----------------------------------------------------------------
// Note [No contraction in _rn]
// nvcc never fuses a __fmul_rn into a following add; g++ under -march=x86-64-v3 contracts
// a*b + c into an FMA across inlined calls (-ffp-contract=fast), which would change the
// bit-exact optimiser kernels. The empty asm makes the product a value the compiler cannot
// see through.
namespace rt::emu {
template <typename T>
inline T rounded(T v) {
  asm("" : "+x"(v));
  return v;
}
}  // namespace rt::emu
inline float __fadd_rn(float a, float b) { return ::rt::emu::rounded(a + b); }
inline float __fsub_rn(float a, float b) { return ::rt::emu::rounded(a - b); }
inline float __fmul_rn(float a, float b) { return ::rt::emu::rounded(a * b); }
inline float __fdiv_rn(float a, float b) { return ::rt::emu::rounded(a / b); }
inline float __fsqrt_rn(float a) { return ::rt::emu::rounded(std::sqrt(a)); }
inline float __fmaf_rn(float a, float b, float c) { return ::rt::emu::rounded(std::fma(a, b, c)); }
inline double __dadd_rn(double a, double b) { return ::rt::emu::rounded(a + b); }
inline double __dsub_rn(double a, double b) { return ::rt::emu::rounded(a - b); }
inline double __dmul_rn(double a, double b) { return ::rt::emu::rounded(a * b); }
inline double __ddiv_rn(double a, double b) { return ::rt::emu::rounded(a / b); }
inline double __dsqrt_rn(double a) { return ::rt::emu::rounded(std::sqrt(a)); }
inline double __fma_rn(double a, double b, double c) { return ::rt::emu::rounded(std::fma(a, b, c)); }
inline double __ull2double_rn(unsigned long long v) { return ::rt::emu::rounded(double(v)); }
inline double __ll2double_rn(long long v) { return ::rt::emu::rounded(double(v)); }
inline float __int2float_rn(int v) { return ::rt::emu::rounded(float(v)); }
inline int __float2int_rn(float v) { return int(std::nearbyint(v)); }
inline int __double2int_rn(double v) { return int(std::nearbyint(v)); }
// ---- the device's math library -----------------------------------------------------------------
// The intrinsics and rsqrt: exact, or with RINGTAPE_EMU_MATH=ulp a value within the error the
// CUDA Programming Guide documents for each (Note [Device numerics] in cuda_emu/device_math.cc,
// which also covers the standard functions: expf, logf, powf, ...).
namespace rt::emu {
enum class DeviceFn : uint8_t {
  fast_expf, fast_logf, fast_fdividef, rsqrtf, rsqrt,
  expf, logf, tanhf, sinf, cosf, erff, log1pf, expm1f, powf,
  exp, log, tanh, sin, cos, erf, log1p, expm1, pow,
};
float device_fn(DeviceFn fn, float x, float y = 0);
double device_fn(DeviceFn fn, double x, double y = 0);
}  // namespace rt::emu
inline float __expf(float v) { return ::rt::emu::device_fn(::rt::emu::DeviceFn::fast_expf, v); }
inline float __logf(float v) { return ::rt::emu::device_fn(::rt::emu::DeviceFn::fast_logf, v); }
inline float __fdividef(float a, float b) { return ::rt::emu::device_fn(::rt::emu::DeviceFn::fast_fdividef, a, b); }
inline float rsqrtf(float v) { return ::rt::emu::device_fn(::rt::emu::DeviceFn::rsqrtf, v); }
inline double rsqrt(double v) { return ::rt::emu::device_fn(::rt::emu::DeviceFn::rsqrt, v); }
