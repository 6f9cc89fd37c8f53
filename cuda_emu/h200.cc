#include "cuda_emu/h200.h"

#include <algorithm>

namespace rt::emu::h200 {
namespace {
int64_t round_up(int64_t v, int64_t unit) { return (v + unit - 1) / unit * unit; }
}  // namespace

double peak_flops(const std::string& math) {
  if (math == "f32") return kFlopsF32;
  if (math == "f64") return kFlopsF64;
  if (math == "bf16") return kFlopsBf16Tensor;
  if (math == "f16") return kFlopsF16Tensor;
  if (math == "tf32") return kFlopsTf32Tensor;
  if (math == "f64-tensor") return kFlopsF64Tensor;
  return 0;
}

Occupancy occupancy(int threads, int registers, int64_t shared_bytes) {
  Occupancy o;
  if (threads <= 0 || registers > kMaxRegistersPerThread || shared_bytes > kMaxSharedPerBlock) return o;
  const int warps = (threads + 31) / 32;
  struct Limit {
    int blocks;
    const char* name;
  };
  Limit lim[4] = {{kMaxWarpsPerSM / warps, "warps"}, {kMaxBlocksPerSM, "blocks"}, {kMaxBlocksPerSM, "registers"},
                  {kMaxBlocksPerSM, "shared memory"}};
  if (registers > 0) {
    const int64_t per_warp = round_up(int64_t(registers) * 32, kRegisterAllocUnit);
    const int64_t warps_by_regs = kRegistersPerSM / per_warp / kWarpAllocGranularity * kWarpAllocGranularity;
    lim[2].blocks = int(warps_by_regs / warps);
  }
  const int64_t smem = round_up(shared_bytes + kSharedReservedPerBlock, kSharedAllocUnit);
  lim[3].blocks = int(std::min<int64_t>(kMaxBlocksPerSM, kSharedPerSM / smem));
  const Limit* best = &lim[0];
  for (const Limit& l : lim)
    if (l.blocks < best->blocks) best = &l;
  o.blocks_per_sm = best->blocks;
  if (o.blocks_per_sm <= 0) return Occupancy{};
  o.warps_per_sm = o.blocks_per_sm * warps;
  o.occupancy = double(o.warps_per_sm) / kMaxWarpsPerSM;
  o.limited_by = best->name;
  return o;
}

Bound bound(double dram_bytes, double flops, double peak, uint64_t launches, uint64_t blocks,
            const Occupancy& occ, int warps_per_block) {
  Bound b;
  b.memory_us = dram_bytes / kDramBytesPerS * 1e6;
  b.compute_us = peak > 0 ? flops / peak * 1e6 : 0;
  b.launch_us = kLaunchUs * double(launches);
  b.bound_us = std::max(b.memory_us, b.compute_us) + b.launch_us;
  const double slots = double(occ.blocks_per_sm) * kSMs;  // blocks the machine holds at once
  if (slots > 0) {
    b.waves = double(blocks) / slots;
    const double first_wave_warps = std::min(double(blocks), slots) * warps_per_block;
    b.fill = first_wave_warps / (double(kSMs) * kMaxWarpsPerSM);
  }
  const double work = std::max(b.memory_us, b.compute_us);
  if (b.launch_us >= work) b.limiter = "launch";  // Note [Limiter]
  else if (blocks > 0 && b.fill < 0.25) b.limiter = "latency";
  else b.limiter = b.compute_us > b.memory_us ? "compute" : "memory";
  return b;
}

}  // namespace rt::emu::h200
