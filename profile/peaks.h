// What the profiler measures achieved throughput against: a device's peak FLOP/s per
// dtype and its copy bandwidth, stored once per device model in a small JSON
// cache (Note [Device peaks]).
//
// Note [Device peaks]
// The copy bandwidth is always measured, never taken from a datasheet: bytes read plus
// bytes written per second by a large device-to-device copy (GPU: cudaMemcpy of 1 GiB; CPU:
// 64 MiB copied by every OpenMP thread), the best of a few runs. bench/cuda_kernel_bench
// stores the GPU's copy bandwidth it measures; a profiler run on a device model the cache
// lacks measures it itself (under a second) and stores it. Peak FLOP/s: on a GPU the
// datasheet's dense tensor-core (bf16, f16, tf32) and CUDA-core (f32, f64) figures for the
// models we know (H200, H100, A100), none otherwise (the tables then leave "% of peak"
// out); on the CPU there is no datasheet to trust (clocks, FMA units and thread counts
// vary), so the peak is the best GEMM throughput measured here (1024^3, Eigen with the ISA
// gemm_isa() picked), labelled as such.
//
// The cache: $RINGTAPE_CACHE_DIR, else $XDG_CACHE_HOME/ringtape, else ~/.cache/ringtape;
// file device_peaks.json = {"version": 1, "devices": {KEY: {...}}}, KEY as key_for().
#pragma once

#include <map>
#include <string>

#include "engine/device.h"
#include "base/dtype.h"

namespace rt::prof {

struct DevicePeaks {
  std::string key;                      // "NVIDIA H200" / "cpu: Intel(R) Xeon(R) ... x2 threads"
  double copy_bytes_per_s = 0;          // read + write, measured
  std::map<std::string, double> flops;  // "f32", "f64", "bf16", "f16", "tf32" -> FLOP/s
  std::string flops_source;             // "datasheet (dense)", "measured GEMM 1024^3 (avx512)", ""
  // Peak FLOP/s for ops in dtype t (0: unknown). With tf32 on, f32 matmuls count against tf32.
  double flops_for(DType t, bool tf32 = false) const;
};

// The cache key of device d's model.
std::string key_for(Device d);
// The cache file's path.
std::string peaks_cache_path();

// Device d's peaks: from the cache, else measured (and stored; a cache that cannot be
// written is a warning on stderr, not an error).
DevicePeaks device_peaks(Device d);
// Measures d's peaks now, ignoring the cache.
DevicePeaks measure_peaks(Device d);
// Stores (replaces) an entry; atomically (temporary file + rename).
void store_peaks(const DevicePeaks& p);
// Reads an entry; false when absent. A malformed cache file is an error naming it and
// saying to delete it.
bool load_peaks(const std::string& key, DevicePeaks* out);

// Datasheet FLOP/s of a GPU model name, empty when unknown.
std::map<std::string, double> gpu_datasheet_flops(const std::string& name);

}  // namespace rt::prof
