// The kernel lab's counters are right (Note [Kernel lab] in cuda_emu/perf.cc): kernels whose
// memory behaviour is known exactly (tests/cuda_emu/kernel_lab.cu) give exactly the numbers
// Nsight Compute defines for them: sectors of coalesced, strided and vector accesses, bank
// conflicts of a 32x32 shared transpose with and without padding and of 8- and 16-byte
// shared accesses, a broadcast that is no conflict, half-warp divergence, atomics, the
// registers ptxas reports and the occupancy they allow. Outside --config=cuda-emu the test
// says SKIPPED.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/io/json.h"
#include "tests/cuda_emu/kernel_lab.h"

#if RINGTAPE_CUDA_EMU && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#include "cuda_emu/emu.h"
#include "cuda_emu/h200.h"

namespace {

namespace lab = rt::emu_test::lab;

// The lab reads RINGTAPE_EMU_PERF at the first queued work: set before main.
std::string perf_path() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/kernel_lab_test.json";
}
const bool kPerfSet = [] { return setenv("RINGTAPE_EMU_PERF", perf_path().c_str(), 1) == 0; }();

struct Buf {
  float* p = nullptr;
  explicit Buf(size_t n, float fill = 1.0f) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)) == cudaSuccess);
    std::vector<float> v(n, fill);
    REQUIRE(cudaMemcpy(p, v.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~Buf() { cudaFree(p); }
};

// The record of the kernel whose instantiated name ends with `name`, launched with grid
// (gx, 1, 1), after writing the lab's file.
rt::json::Value record(const std::string& name, int64_t gx) {
  REQUIRE(kPerfSet);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(rt::emu::perf_write());
  std::ifstream in(perf_path());
  std::stringstream ss;
  ss << in.rdbuf();
  const rt::json::Value doc = rt::json::parse(ss.str());
  REQUIRE(doc.find("format")->as_string() == "ringtape kernel lab 1");
  for (const rt::json::Value& r : doc.find("records")->as_array()) {
    const std::string& k = r.find("kernel")->as_string();
    if (r.find("kind")->as_string() == "kernel" && k.size() >= name.size() &&
        k.compare(k.size() - name.size(), name.size(), name) == 0 && r.find("grid")->as_array()[0].as_int() == gx)
      return r;
  }
  FAIL("no record of " << name << " with grid.x " << gx << " in " << perf_path());
  return {};
}

int64_t count(const rt::json::Value& r, const char* field) { return r.find(field)->as_int(); }
double value(const rt::json::Value& r, const char* field) { return r.find(field)->as_double(); }

TEST_CASE("a coalesced copy: 4 sectors per 128-byte request, ideal = actual") {
  const int n = 4096;
  Buf x(n), y(n);
  lab::copy(x.p, y.p, n);
  const auto r = record("::copy_kernel", 32);
  CHECK(count(r, "launches") == 1);
  CHECK(r.find("site")->as_string().find("tests/cuda_emu/kernel_lab.cu:") == 0);
  CHECK(r.find("written")->as_string() == "copy_kernel");
  CHECK(count(r, "global_load_requests") == n / 32);
  CHECK(count(r, "global_load_sectors") == 4 * n / 32);
  CHECK(count(r, "global_load_sectors_ideal") == 4 * n / 32);
  CHECK(count(r, "global_store_requests") == n / 32);
  CHECK(count(r, "global_store_sectors") == 4 * n / 32);
  CHECK(count(r, "global_store_sectors_ideal") == 4 * n / 32);
  CHECK(count(r, "shared_wavefronts") == 0);
  CHECK(value(r, "active_lanes_per_instruction") == 32.0);
  CHECK(count(r, "dram_bytes_lower_bound") == 2 * n * 4);
  CHECK(count(r, "flops") == 0);
  // ptxas: 10 registers, 128 threads: 16 blocks of 4 warps fill the 64 warps of an SM.
  CHECK(count(r, "registers_per_thread") == 10);
  CHECK(value(r, "occupancy") == 1.0);
  CHECK(value(r, "waves") == doctest::Approx(32.0 / (16 * 132)));
  // 32 KiB at 4.8 TB/s is 7 ns: the launch's 2 us dominate.
  CHECK(r.find("limiter")->as_string() == "launch");
  CHECK(value(r, "bound_us") == doctest::Approx(rt::emu::h200::kLaunchUs + 2.0 * n * 4 / 4.8e12 * 1e6));
}

TEST_CASE("the same copy strided by 32 elements: 32 sectors per request") {
  const int n = 1024, stride = 32;
  Buf x(size_t(n) * stride), y(n);
  lab::strided_copy(x.p, y.p, n, stride);
  const auto r = record("::strided_copy_kernel", 8);
  CHECK(count(r, "global_load_requests") == n / 32);
  CHECK(count(r, "global_load_sectors") == n);          // every lane its own sector
  CHECK(count(r, "global_load_sectors_ideal") == n / 8);  // 128 bytes: 4 sectors a request
  CHECK(count(r, "global_store_sectors") == n / 8);
  CHECK(count(r, "dram_bytes_lower_bound") == 2 * n * 4);  // distinct bytes only
}

TEST_CASE("a 32x32 shared transpose: 31 extra wavefronts per request without padding, none with it") {
  Buf x(1024), y(1024);
  lab::transpose32(x.p, y.p, false);
  lab::transpose32(x.p, y.p, true);
  const auto plain = record("::transpose32_kernel<0>", 1);
  CHECK(count(plain, "shared_store_requests") == 32);  // rows: 32 banks, 1 wavefront each
  CHECK(count(plain, "shared_load_requests") == 32);   // columns: one bank, 32 words
  CHECK(count(plain, "shared_wavefronts") == 32 * 1 + 32 * 32);
  CHECK(count(plain, "shared_bank_conflicts") == 32 * 31);
  CHECK(count(plain, "global_load_sectors") == 32 * 4);
  const auto padded = record("::transpose32_kernel<1>", 1);
  CHECK(count(padded, "shared_load_requests") == 32);
  CHECK(count(padded, "shared_wavefronts") == 64);
  CHECK(count(padded, "shared_bank_conflicts") == 0);
  CHECK(count(padded, "static_shared_bytes") == 32 * 33 * 4);
}

TEST_CASE("half-warp divergence: 16 active lanes per instruction") {
  const int n = 128;
  Buf x(n), y(n);
  lab::half_warp_copy(x.p, y.p, n);
  const auto r = record("::half_warp_kernel", 1);
  CHECK(value(r, "active_lanes_per_instruction") == 16.0);
  CHECK(count(r, "global_load_requests") == 4);
  CHECK(count(r, "global_load_sectors") == 8);  // 64 bytes per request
  CHECK(count(r, "global_load_sectors_ideal") == 8);
  CHECK(count(r, "dram_bytes_lower_bound") == 2 * 64 * 4);
}

TEST_CASE("a broadcast read of one shared word is no conflict") {
  Buf x(1), y(32);
  lab::broadcast(x.p, y.p);
  const auto r = record("::broadcast_kernel", 1);
  CHECK(count(r, "shared_store_requests") == 1);
  CHECK(count(r, "shared_load_requests") == 1);
  CHECK(count(r, "shared_wavefronts") == 2);
  CHECK(count(r, "shared_bank_conflicts") == 0);
  // Instructions: thread 0's global load and shared store (1 lane), the shared load and
  // the global store (32 lanes).
  CHECK(value(r, "active_lanes_per_instruction") == doctest::Approx((1 + 1 + 32 + 32) / 4.0));
}

TEST_CASE("a register-heavy kernel: occupancy drops as ptxas's register count says") {
  const int n = 512;
  Buf x(n), y(n);
  lab::register_heavy(x.p, y.p, n);
  const auto r = record("::register_heavy_kernel", 2);
  // ptxas (sm_90): 128 registers; 4096 per warp: 16 warps, 2 blocks of 8 warps per SM.
  CHECK(count(r, "registers_per_thread") == 128);
  CHECK(count(r, "spill_bytes") == 0);
  CHECK(value(r, "occupancy") == 0.25);
  CHECK(r.find("occupancy_limited_by")->as_string() == "registers");
  CHECK(rt::emu::h200::occupancy(256, 128, 0).occupancy == 0.25);
  CHECK(rt::emu::h200::occupancy(256, 64, 0).occupancy == 0.5);
}

TEST_CASE("8- and 16-byte vector accesses: global sectors and shared phases") {
  const int n = 1024;  // vectors
  Buf x(4 * n), y(4 * n);
  lab::vector_copy(x.p, y.p, n, 2);
  lab::vector_copy(x.p, y.p, n, 4);
  const auto v2 = record("::vector_copy_kernel<float2>", 8);
  CHECK(count(v2, "global_load_requests") == n / 32);
  CHECK(count(v2, "global_load_sectors") == 8 * n / 32);  // 256 bytes per request
  CHECK(count(v2, "global_load_sectors_ideal") == 8 * n / 32);
  CHECK(count(v2, "global_store_sectors") == 8 * n / 32);
  const auto v4 = record("::vector_copy_kernel<float4>", 8);
  CHECK(count(v4, "global_load_sectors") == 16 * n / 32);  // 512 bytes per request
  CHECK(count(v4, "global_store_sectors_ideal") == 16 * n / 32);

  lab::shared_vectors(x.p, y.p, 2, 1);
  lab::shared_vectors(x.p, y.p, 2, 2);
  lab::shared_vectors(x.p, y.p, 4, 1);
  lab::shared_vectors(x.p, y.p, 4, 2);
  // float2, consecutive: two half-warp phases of 128 bytes each, no conflict.
  const auto s21 = record("::shared_vectors_kernel<float2, 1>", 1);
  CHECK(count(s21, "shared_wavefronts") == 2 + 2);
  CHECK(count(s21, "shared_bank_conflicts") == 0);
  // float2 every other slot: each half-warp spans 256 bytes, every bank twice.
  const auto s22 = record("::shared_vectors_kernel<float2, 2>", 1);
  CHECK(count(s22, "shared_wavefronts") == 4 + 4);
  CHECK(count(s22, "shared_bank_conflicts") == 2 + 2);
  // float4, consecutive: four quarter-warp phases.
  const auto s41 = record("::shared_vectors_kernel<float4, 1>", 1);
  CHECK(count(s41, "shared_wavefronts") == 4 + 4);
  CHECK(count(s41, "shared_bank_conflicts") == 0);
  const auto s42 = record("::shared_vectors_kernel<float4, 2>", 1);
  CHECK(count(s42, "shared_wavefronts") == 8 + 8);
  CHECK(count(s42, "shared_bank_conflicts") == 4 + 4);
  CHECK(count(s42, "global_load_sectors") == 16);
}

TEST_CASE("atomics: one request per warp, the word read and written") {
  Buf c(1, 0.0f);
  lab::atomic_count(c.p);
  const auto r = record("::atomic_count_kernel", 1);
  CHECK(count(r, "atomics") == 2);
  CHECK(count(r, "global_load_requests") == 0);
  CHECK(count(r, "global_store_requests") == 0);
  CHECK(count(r, "dram_bytes_lower_bound") == 8);
  float got = 0;
  REQUIRE(cudaMemcpy(&got, c.p, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(got == 64.0f);
}

TEST_CASE("launches of one configuration add up; the FLOP hint is the launch's") {
  const int n = 2048;
  Buf x(n), y(n);
  lab::hinted_copy(x.p, y.p, n);
  lab::hinted_copy(x.p, y.p, n);
  lab::copy(x.p, y.p, 1536);  // no hint: the last one was the previous launch's
  const auto r = record("::copy_kernel", 16);
  CHECK(count(r, "launches") == 2);
  CHECK(value(r, "flops") == 2 * 3.0 * n);
  CHECK(count(r, "global_load_sectors") == 2 * 4 * n / 32);
  CHECK(count(r, "dram_bytes_lower_bound") == 2 * 2 * n * 4);
  CHECK(value(r, "launch_us") == doctest::Approx(2 * rt::emu::h200::kLaunchUs));
  CHECK(count(record("::copy_kernel", 12), "flops") == 0);
}

TEST_CASE("a kernel whose template arguments the launch deduces is named by its instantiation") {
  const int n = 640;
  Buf x(n), y(n);
  lab::deduced_copy(x.p, y.p, n);
  const auto r = record("::deduced_copy_kernel<float>", 5);
  CHECK(r.find("written")->as_string() == "deduced_copy_kernel");
  CHECK(count(r, "global_load_sectors") == 4 * n / 32);
  CHECK(count(r, "registers_per_thread") == 10);  // found in ptxas's report by that name
}

TEST_CASE("a window records only the work queued while it is open") {
  const int n = 256;
  Buf x(n), y(n);
  rt::emu::perf_window(false);
  lab::copy(x.p, y.p, n);  // grid 2: not recorded
  rt::emu::perf_window(true);
  lab::copy(x.p, y.p, n);
  rt::emu::perf_window(false);
  lab::copy(x.p, y.p, n);
  const auto r = record("::copy_kernel", 2);
  CHECK(count(r, "launches") == 1);
  rt::emu::perf_window(true);
}

}  // namespace

#else
TEST_CASE("kernel lab (needs --config=cuda-emu)") { std::puts("SKIPPED: the kernel lab runs under --config=cuda-emu"); }
#endif
