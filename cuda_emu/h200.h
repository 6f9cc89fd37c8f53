// The NVIDIA H200 (SXM, compute capability 9.0) as the kernel lab models it: its limits per
// multiprocessor, its peaks, and what follows from them for one launch (theoretical
// occupancy, waves, the roofline bound and its limiter). docs/kernel-lab.md says what each
// figure means and what this model cannot know.
//
// Note [H200 model]
// Sources: NVIDIA's H200 datasheet (141 GB HBM3e at 4.8 TB/s; the SXM part's dense
// tensor-core and CUDA-core rates are the H100 SXM's: bf16/f16 989.4, tf32 494.7, fp32 66.9,
// fp64 33.5 (vector) and 66.9 (tensor) TFLOP/s) and the CUDA Programming Guide's table of
// compute capability 9.0 (132 SMs on the SXM part; per SM 64 warps, 32 blocks, 65,536
// registers, 228 KB of shared memory of which a block may use 227 KB, 1 KB reserved per
// block; registers allocated per warp in units of 256, warps in groups of 4), which is what
// the CUDA occupancy calculator applies. These are ceilings, not measurements: a device
// machine measured about 4.3 TB/s for a copy and about 790 TFLOP/s for a bf16 GEMM.
//
// The launch cost is an assumption, not a datasheet figure: kLaunchUs is what one kernel of
// a stream costs beyond its work when launched one by one from the host (CUDA 12/13 on
// Hopper: about 2 us from host call to the next kernel's start; a CUDA graph replays
// launches about 1 us apart). A launch whose data and arithmetic take less is `launch`-bound.
#pragma once

#include <cstdint>
#include <string>

namespace rt::emu::h200 {

constexpr int kSMs = 132;
constexpr int kMaxWarpsPerSM = 64;
constexpr int kMaxBlocksPerSM = 32;
constexpr int kRegistersPerSM = 65536;
constexpr int kMaxRegistersPerThread = 255;
constexpr int kRegisterAllocUnit = 256;  // registers, per warp
constexpr int kWarpAllocGranularity = 4;
constexpr int kSharedPerSM = 228 * 1024;
constexpr int kMaxSharedPerBlock = 227 * 1024;
constexpr int kSharedReservedPerBlock = 1024;
constexpr int kSharedAllocUnit = 128;

constexpr double kDramBytesPerS = 4.8e12;
constexpr double kFlopsF32 = 66.9e12;    // CUDA cores (FMA = 2)
constexpr double kFlopsF64 = 33.5e12;    // CUDA cores
constexpr double kFlopsBf16Tensor = 989.4e12;  // dense
constexpr double kFlopsF16Tensor = 989.4e12;
constexpr double kFlopsTf32Tensor = 494.7e12;
constexpr double kFlopsF64Tensor = 66.9e12;
constexpr double kLaunchUs = 2.0;  // Note [H200 model]

// Peak FLOP/s of a math mode: "f32" and "f64" (CUDA cores, hand-written kernels), "bf16",
// "f16", "tf32" and "f64-tensor" (tensor cores, library calls). 0 for an unknown name.
double peak_flops(const std::string& math);

struct Occupancy {
  int blocks_per_sm = 0;
  int warps_per_sm = 0;
  double occupancy = 0;       // warps_per_sm / 64
  const char* limited_by = "";  // "warps", "blocks", "registers", "shared memory", or "" when it cannot run
};

// Theoretical occupancy of a block of `threads` threads using `registers` registers per
// thread (0: unknown, then registers are not a limit) and `shared_bytes` of shared memory
// (static + dynamic), as the CUDA occupancy calculator computes it for sm_90.
Occupancy occupancy(int threads, int registers, int64_t shared_bytes);

struct Bound {
  double memory_us = 0;   // dram bytes at kDramBytesPerS
  double compute_us = 0;  // flops at the math mode's peak
  double launch_us = 0;   // kLaunchUs per launch
  double bound_us = 0;    // max(memory, compute) + launch
  double waves = 0;       // blocks / (blocks per SM x 132), per launch
  double fill = 0;        // the first wave's warps over the machine's 132 x 64 warp slots
  std::string limiter;    // "memory", "compute", "latency" or "launch" (docs/kernel-lab.md)
};

// The roofline bound of `launches` launches of `blocks` blocks each, moving `dram_bytes` and
// doing `flops` in all, at `peak` FLOP/s. `blocks` 0: the grid is not known (a library
// call), and no latency limit is judged.
//
// Note [Limiter]
// `launch` when the launch cost is at least the larger of the memory and compute times;
// else `latency` when the first wave fills less than a quarter of the machine's warp slots
// (132 x 64 warps): too few warps in flight to cover the memory and pipeline latencies that
// the roofline ignores (Little's law: 4.8 TB/s x ~600 ns needs ~3 MB in flight, about 24 KB
// per SM); else `compute` or `memory`, whichever time is larger.
Bound bound(double dram_bytes, double flops, double peak, uint64_t launches, uint64_t blocks,
            const Occupancy& occ, int warps_per_block);

}  // namespace rt::emu::h200
