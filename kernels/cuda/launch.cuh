// One source, two targets: how .cu files launch kernels, declare shared memory and ask for
// unrolling, so that the same file compiles with nvcc and, under --config=cuda-emu, as C++
// for the CPU emulation (cuda_emu/simt.h, docs/cuda-on-cpu.md):
//
//   written here                                          nvcc sees
//   RT_LAUNCH(grid, block, smem, stream, k<T, 256>)(a);   k<T, 256><<<grid, block, smem, stream>>>(a);
//   RT_SHARED(float, buf, [32][33]);                      __shared__ float buf[32][33];
//   RT_SHARED_DYNAMIC(float, buf);                        extern __shared__ float buf[];
//   RT_UNROLL for (...)                                   #pragma unroll
//
// The kernel comes last in RT_LAUNCH so that template arguments with commas need no
// parentheses; the kernel's template arguments are deduced from the call as with <<<>>>
// (under --config=cuda-emu the kernel lab names the instantiation: cuda_emu/simt.h,
// instance_name).
#pragma once

#if !defined(RINGTAPE_CUDA_EMU_DEVICE)  // nvcc; the emulation defines these in simt.h
#define RT_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#define RT_SHARED(T, name, dims) __shared__ T name dims
#define RT_SHARED_DYNAMIC(T, name)                          \
  extern __shared__ __align__(16) unsigned char rt_smem_[]; \
  T* name = reinterpret_cast<T*>(rt_smem_)
#ifdef __CUDA_ARCH__  // the device pass: the host compiler does not know the pragma
#define RT_UNROLL _Pragma("unroll")
#else
#define RT_UNROLL
#endif
#endif

namespace rt::cuda {
// The floating-point operations of the next kernel this host thread launches (an FMA counts
// 2), for the kernel lab's roofline under --config=cuda-emu (docs/kernel-lab.md); `f64`
// when they run at FP64's rate. Nothing anywhere else.
inline void flops_hint(double flops, bool f64 = false) {
#if defined(RINGTAPE_CUDA_EMU_DEVICE)
  ::rt::emu::next_launch_flops(flops, f64);
#else
  (void)flops;
  (void)f64;
#endif
}
}  // namespace rt::cuda
