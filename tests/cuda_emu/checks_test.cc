// The checks of --config=cuda-emu bite: each planted bug (tests/cuda_emu/planted.cu) is
// caught with a report that names the problem, the kernel, its launch site, the block and
// thread and, for memory accesses, the source line; the same kernel without the bug runs
// and computes the right result. Outside --config=cuda-emu the test says SKIPPED.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "tests/cuda_emu/planted.h"

// The emulator's own checks: under cuda-emu-asan and -tsan the sanitizer's instrumentation
// replaces them (docs/cuda-on-cpu.md), so these cases run in the plain config only.
#if RINGTAPE_CUDA_EMU && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#include "cuda_emu/emu.h"

namespace {

using rt::emu_test::block_sum;

struct Buf {
  float* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t count) : n(count) { REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)) == cudaSuccess); }
  Buf(const std::vector<float>& v) : Buf(v.size()) {
    REQUIRE(cudaMemcpy(p, v.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~Buf() { cudaFree(p); }
  std::vector<float> get() const {
    std::vector<float> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
};

// Device copy of host integers (indices, bins).
struct Ints {
  int* p = nullptr;
  explicit Ints(const std::vector<int>& v) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), v.size() * sizeof(int)) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, v.data(), v.size() * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~Ints() { cudaFree(p); }
};

std::vector<float> iota(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 1.0f);
  return v;
}

// Runs the launch of a planted bug: the fault is asynchronous, as on a GPU, and may already
// be seen by the launcher's own check of cudaGetLastError (which then throws).
template <typename F>
void launch_planted(F&& launch) {
  try {
    launch();
  } catch (const std::exception& e) {
    CHECK_MESSAGE(std::string(e.what()).find("cuda-emu:") != std::string::npos, e.what());
  }
}

// The device's work ends in a fault whose report contains every one of `parts`; the fault
// is cleared for the next case.
void expect_fault(const std::vector<std::string>& parts) {
  const cudaError_t e = cudaDeviceSynchronize();
  CHECK_MESSAGE(e != cudaSuccess, "the planted bug was not caught");
  const std::string report = rt::emu::last_fault();
  for (const std::string& p : parts) CHECK_MESSAGE(report.find(p) != std::string::npos, "'", p, "' not in:\n", report);
  rt::emu::clear_faults();
}

void expect_clean() {
  const cudaError_t e = cudaDeviceSynchronize();
  REQUIRE_MESSAGE(e == cudaSuccess, cudaGetErrorString(e));
}

}  // namespace

TEST_CASE("a block-wide tree sum is right; without its barrier the race check names both threads") {
  for (int threads : {32, 256, 1024}) {
    Buf x(iota(1000)), y(1);
    block_sum(x.p, 1000, y.p, threads, false, nullptr);
    expect_clean();
    CHECK(y.get()[0] == doctest::Approx(500500.0));
    launch_planted([&] { block_sum(x.p, 1000, y.p, threads, true, nullptr); });
    expect_fault({"shared-memory race", "block_sum_kernel<true>", "planted.cu", "block (0,0,0), thread ("});
  }
}

TEST_CASE("a __syncthreads in a branch, and one after an early return, are barrier divergence") {
  Buf x(iota(64)), y(1);
  launch_planted([&] { rt::emu_test::block_sum_barrier_in_branch(x.p, 64, y.p, 64, nullptr); });
  expect_fault({"barrier divergence", "block_sum_branch_kernel", "planted.cu"});
  launch_planted([&] { rt::emu_test::block_sum_early_return(x.p, 40, y.p, 64, nullptr); });
  expect_fault({"barrier divergence", "threads 40-63", "have exited"});
  rt::emu_test::block_sum_early_return(x.p, 64, y.p, 64, nullptr);  // every thread reaches it
  expect_clean();
  CHECK(y.get()[0] == doctest::Approx(64.0 * 65 / 2));
}

TEST_CASE("a helper with barriers inlined into two branches is barrier divergence (Note [Barrier instances])") {
  // Every thread reaches the same source lines; the line check alone passed this kernel.
  Buf x(iota(64)), y(2);
  rt::emu_test::helper_sum(x.p, 64, y.p, 64, false, nullptr);  // called once, by every thread
  expect_clean();
  CHECK(y.get()[0] == doctest::Approx(64.0 * 65 / 2));
  launch_planted([&] { rt::emu_test::helper_sum(x.p, 64, y.p, 64, true, nullptr); });
  expect_fault({"barrier divergence", "wait at two copies of the __syncthreads at tests/cuda_emu/planted.cu:",
                "helper_sum_kernel<true>"});
}

TEST_CASE("lanes of a warp are ordered only by a warp operation both take part in (Note [Warp order])") {
  Buf y(1);
  rt::emu_test::warp_handoff(y.p, true, nullptr);
  expect_clean();
  CHECK(y.get()[0] == 1.0f);
  // Lane 0 passed a __syncwarp of its own: the count heuristic took that for an order.
  launch_planted([&] { rt::emu_test::warp_handoff(y.p, false, nullptr); });
  expect_fault({"shared-memory race", "warp_handoff_kernel<false>", "thread (0,0,0)", "thread (1,0,0)"});
}

TEST_CASE("blocks of one launch writing one index race unless both use atomics (Note [Races between blocks])") {
  // 256 elements into 8 slots: element i goes to slot i % 8, so every block hits every slot.
  std::vector<int> idx(256);
  for (int i = 0; i < 256; ++i) idx[size_t(i)] = i % 8;
  Ints d_idx(idx);
  Buf x(iota(256)), y(std::vector<float>(8, 0.0f));
  rt::emu_test::index_add(x.p, d_idx.p, 256, y.p, true, nullptr);
  expect_clean();
  const std::vector<float> got = y.get();
  for (int k = 0; k < 8; ++k) CHECK(got[size_t(k)] == doctest::Approx(32.0 * (k + 1) + 8.0 * 31 * 32 / 2));
  launch_planted([&] { rt::emu_test::index_add(x.p, d_idx.p, 256, y.p, false, nullptr); });
  // The second block to reach a slot reports; which one that is depends on the host workers.
  expect_fault({"race between blocks", "index_add_kernel", "planted.cu:", "block (", "thread (",
                "in this launch at ", "planted.cu:"});
}

TEST_CASE("a plain store racing other blocks' atomics, and a read of what another block writes, are races") {
  Buf x(iota(256)), y(1);
  REQUIRE(cudaMemset(y.p, 0, sizeof(float)) == cudaSuccess);
  rt::emu_test::atomic_total(x.p, 256, y.p, false, nullptr);  // zeroed before the launch: atomics only
  expect_clean();
  CHECK(y.get()[0] == doctest::Approx(256.0 * 257 / 2));
  launch_planted([&] { rt::emu_test::atomic_total(x.p, 256, y.p, true, nullptr); });
  expect_fault({"race between blocks (plain and atomic)", "atomic_total_kernel", "planted.cu:"});
  Buf z(iota(256));
  launch_planted([&] { rt::emu_test::shift_left_in_place(z.p, 256, nullptr); });
  expect_fault({"race between blocks", "shift_left_kernel", "planted.cu:"});
}

TEST_CASE("shared memory: atomics do not race each other, a plain read among them does") {
  std::vector<int> bins(200);
  for (int i = 0; i < 200; ++i) bins[size_t(i)] = (i * 7) % 16;
  Ints d_bins(bins);
  unsigned* out = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&out), 17 * sizeof(unsigned)) == cudaSuccess);
  rt::emu_test::shared_histogram(d_bins.p, 200, out, false, nullptr);
  expect_clean();
  std::vector<unsigned> got(16), want(16, 0);
  REQUIRE(cudaMemcpy(got.data(), out, 16 * sizeof(unsigned), cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int b : bins) ++want[size_t(b)];
  CHECK(got == want);
  launch_planted([&] { rt::emu_test::shared_histogram(d_bins.p, 200, out, true, nullptr); });
  expect_fault({"shared-memory race (", "atomic", "shared_histogram_kernel",
                "planted.cu:"});
  cudaFree(out);
}

TEST_CASE("a read past the end in a grid-stride tail is out of bounds, at its source line") {
  const int64_t n = 1000;  // 192 threads: the loop's tail covers the last elements
  Buf x(iota(n)), y(n);
  rt::emu_test::pair_sum(x.p, n, y.p, false, nullptr);
  expect_clean();
  CHECK(y.get()[n - 1] == doctest::Approx(1000.0));
  launch_planted([&] { rt::emu_test::pair_sum(x.p, n, y.p, true, nullptr); });
  expect_fault({"out-of-bounds read of 4 bytes", "past the end of the 4000-byte block", "pair_sum_kernel",
                "planted.cu:"});
}

TEST_CASE("an index past a thread's own array faults, naming the array and the line (Note [Local arrays])") {
  Buf y(32);
  rt::emu_test::local_pick(8, y.p, nullptr);
  expect_clean();
  CHECK(y.get()[9] == doctest::Approx(10.0));  // v[1] of thread 9: 1 + 9
  launch_planted([&] { rt::emu_test::local_pick(9, y.p, nullptr); });
  // Threads 8, 17 and 26 each read v[8]; whichever runs first faults.
  expect_fault({"out-of-bounds index 8 of an array of type 'float [8]'", "local_pick_kernel", "planted.cu:"});
}

TEST_CASE("an overrun of a block of an exact multiple of 256 bytes faults in its red zone (Note [Red zones])") {
  // 1024 floats: no slack after the block, and (before red zones) the next cudaMalloc's block
  // began where it ended, written: the read of x[n] read the neighbour's first float, unseen.
  const int64_t n = 1024;
  Buf x(iota(n)), neighbour(iota(n)), y(n);
  rt::emu_test::pair_sum(x.p, n, y.p, false, nullptr);
  expect_clean();
  launch_planted([&] { rt::emu_test::pair_sum(x.p, n, y.p, true, nullptr); });
  expect_fault({"out-of-bounds read of 4 bytes", "past the end of the 4096-byte block", "pair_sum_kernel"});
}

TEST_CASE("reading never-written device memory is reported") {
  Buf x(256), y(256);  // x never written
  launch_planted([&] { rt::emu_test::scale(x.p, 256, y.p, 64, nullptr); });
  expect_fault({"read of never-written device memory", "scale_kernel"});
  REQUIRE(cudaMemset(x.p, 0, 256 * sizeof(float)) == cudaSuccess);
  rt::emu_test::scale(x.p, 256, y.p, 64, nullptr);
  expect_clean();
}

TEST_CASE("warp shuffles sum a warp; a full mask naming exited lanes is caught") {
  const int n = 100;  // the last warp of the second block is partly past n
  Buf x(iota(n)), y(4);
  rt::emu_test::warp_sums(x.p, n, y.p, false, nullptr);
  expect_clean();
  const std::vector<float> s = y.get();
  CHECK(s[0] == doctest::Approx(32.0 * 33 / 2));
  CHECK(s[3] == doctest::Approx(97 + 98 + 99 + 100));
  launch_planted([&] { rt::emu_test::warp_sums(x.p, n, y.p, true, nullptr); });
  expect_fault({"__shfl_xor_sync", "which has exited", "warp_sums_kernel"});
}

TEST_CASE("launch limits are an H200's and fail the launch as CUDA does") {
  Buf x(iota(64)), y(64);
  CHECK_THROWS_WITH_AS(rt::emu_test::scale(x.p, 64, y.p, 2048, nullptr), doctest::Contains("cudaErrorInvalidConfiguration"),
                       std::exception);
  CHECK(cudaGetLastError() == cudaSuccess);  // a launch error is not sticky
  rt::emu_test::scale(x.p, 64, y.p, 1024, nullptr);
  expect_clean();
}

TEST_CASE("misaligned vector loads are caught") {
  Buf x(iota(64)), y(64);
  rt::emu_test::pack_copy(x.p, 8, 0, y.p, nullptr);
  expect_clean();
  launch_planted([&] { rt::emu_test::pack_copy(x.p, 8, 1, y.p, nullptr); });
  expect_fault({"misaligned 16-byte read", "pack_copy_kernel"});
}

TEST_CASE("shared memory: never-written reads are caught") {
  Buf y(1);
  rt::emu_test::shared_read(64, 63, y.p, nullptr);
  expect_clean();
  CHECK(y.get()[0] == 63.0f);
  launch_planted([&] { rt::emu_test::shared_read(32, 40, y.p, nullptr); });
  expect_fault({"read of never-written shared memory", "offset 160"});
}

TEST_CASE("a kernel touching host memory is caught") {
  std::vector<float> host(64, 1.0f);
  Buf y(64);
  launch_planted([&] { rt::emu_test::scale(host.data(), 64, y.p, 64, nullptr); });
  expect_fault({"host memory, which a kernel cannot reach", "scale_kernel"});
}

TEST_CASE("a kernel on one device touching another device's memory names both") {
  int n = 0;
  REQUIRE(cudaGetDeviceCount(&n) == cudaSuccess);
  if (n < 2) {
    std::printf("SKIPPED: one emulated device (set RINGTAPE_EMU_DEVICES=2)\n");
    return;
  }
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  Buf x(iota(64)), y(64);  // on cuda:1
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  launch_planted([&] { rt::emu_test::scale(x.p, 64, y.p, 64, nullptr); });  // the rank that forgot cudaSetDevice(1)
  expect_fault({"memory of cuda:1, but the kernel runs on cuda:0", "missing cudaSetDevice"});
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  rt::emu_test::scale(x.p, 64, y.p, 64, nullptr);
  expect_clean();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

TEST_CASE("work on two streams: an event orders them; without it the hazard names both operations") {
  cudaStream_t a, b;
  REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t e;
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  Buf x(iota(4096)), y(4096), z(4096);
  rt::emu_test::scale(x.p, 4096, y.p, 256, a);  // writes y on a
  REQUIRE(cudaEventRecord(e, a) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(b, e, 0) == cudaSuccess);
  rt::emu_test::scale(y.p, 4096, z.p, 256, b);  // reads y on b, after the event
  expect_clean();
  CHECK(z.get()[4095] == doctest::Approx(4.0 * 4096));

  rt::emu_test::scale(x.p, 4096, y.p, 256, a);
  launch_planted([&] { rt::emu_test::scale(y.p, 4096, z.p, 256, b); });  // the planted bug: no wait for a's write
  expect_fault({"cross-stream hazard", "by 'scale_kernel'", "missing cudaStreamWaitEvent"});  // either order of the two
  cudaEventDestroy(e);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

TEST_CASE("a write ordered after one stream's read but not another's is a hazard (Note [Readers per stream])") {
  // Streams a and b read y; b's read runs later (after a slow kernel on d it waits for); c
  // waits for b only and then writes y. One reader kept per granule (b's, the last) let the
  // write pass while a's read was not ordered before it.
  cudaStream_t a, b, c, d;
  for (cudaStream_t* s : {&a, &b, &c, &d}) REQUIRE(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t slow_done, b_read;
  REQUIRE(cudaEventCreate(&slow_done) == cudaSuccess);
  REQUIRE(cudaEventCreate(&b_read) == cudaSuccess);
  Buf x(iota(4096)), y(iota(4096)), z1(4096), z2(4096);
  unsigned* counter = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(unsigned)) == cudaSuccess);
  REQUIRE(cudaMemset(counter, 0, sizeof(unsigned)) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  auto read_twice_then_write = [&](bool c_waits_for_a) {
    rt::emu_test::scale(y.p, 4096, z1.p, 256, a);       // a reads y
    rt::emu_test::count(int64_t(1) << 18, counter, d);  // d: slow
    REQUIRE(cudaEventRecord(slow_done, d) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(b, slow_done, 0) == cudaSuccess);
    rt::emu_test::scale(y.p, 4096, z2.p, 256, b);       // b reads y, after a has
    REQUIRE(cudaEventRecord(b_read, b) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(c, b_read, 0) == cudaSuccess);
    cudaEvent_t a_read;
    REQUIRE(cudaEventCreate(&a_read) == cudaSuccess);
    REQUIRE(cudaEventRecord(a_read, a) == cudaSuccess);
    if (c_waits_for_a) REQUIRE(cudaStreamWaitEvent(c, a_read, 0) == cudaSuccess);
    launch_planted([&] { rt::emu_test::scale(x.p, 4096, y.p, 256, c); });  // c writes y
    cudaEventDestroy(a_read);
  };
  read_twice_then_write(true);
  expect_clean();
  read_twice_then_write(false);
  expect_fault({"cross-stream hazard", "last read by 'scale_kernel'", "which may still be reading it"});
  cudaFree(counter);
}

TEST_CASE("each device has its own memory limit (RINGTAPE_EMU_MEMORY, 256M here): beyond it, out of memory") {
  size_t free0 = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free0, &total) == cudaSuccess);
  CHECK(total == size_t(256) << 20);
  void* big = nullptr;
  CHECK(cudaMalloc(&big, size_t(300) << 20) == cudaErrorMemoryAllocation);
  CHECK(big == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);  // not sticky: read once, then clear
  CHECK(cudaGetLastError() == cudaSuccess);
  void* a = nullptr;
  REQUIRE(cudaMalloc(&a, size_t(100) << 20) == cudaSuccess);
  size_t free1 = 0;
  REQUIRE(cudaMemGetInfo(&free1, &total) == cudaSuccess);
  CHECK(free0 - free1 == size_t(100) << 20);
  int n = 0;
  REQUIRE(cudaGetDeviceCount(&n) == cudaSuccess);
  if (n >= 2) {  // the other device's memory is its own
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    void* b = nullptr;
    CHECK(cudaMalloc(&b, size_t(200) << 20) == cudaSuccess);
    cudaFree(b);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
  }
  CHECK(cudaFree(a) == cudaSuccess);
  CHECK(cudaSetDevice(7) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);  // as CUDA: the failed call's error, once
}

TEST_CASE("__fmul_rn then __fadd_rn round twice: never contracted into an FMA (Note [No contraction in _rn])") {
  // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: the product rounds (a tie, to even) to 1 + 2^-11, so the
  // sum with -1 is 2^-11; one fused multiply-add would keep the 2^-24.
  const float a = 1.0f + 0x1p-12f;
  Buf x(std::vector<float>{a}), z(std::vector<float>{-1.0f}), y(1);
  rt::emu_test::mul_add_rn(x.p, x.p, z.p, 1, y.p, nullptr);
  expect_clean();
  CHECK(y.get()[0] == 0x1p-11f);
  CHECK(std::fma(a, a, -1.0f) != 0x1p-11f);  // the value a contraction would give
}

TEST_CASE("the legacy default stream waits for blocking streams and they for it; non-blocking ones do not") {
  cudaStream_t blocking, free_running;
  REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&free_running, cudaStreamNonBlocking) == cudaSuccess);
  Buf x(iota(4096)), y(4096), z(4096);
  rt::emu_test::scale(x.p, 4096, y.p, 256, nullptr);   // y on the legacy stream ...
  rt::emu_test::scale(y.p, 4096, z.p, 256, blocking);  // ... read on a blocking one: ordered
  rt::emu_test::scale(z.p, 4096, y.p, 256, nullptr);   // and back: ordered
  expect_clean();
  CHECK(y.get()[4095] == doctest::Approx(8.0 * 4096));
  rt::emu_test::scale(x.p, 4096, y.p, 256, nullptr);
  launch_planted([&] { rt::emu_test::scale(y.p, 4096, z.p, 256, free_running); });  // not ordered
  expect_fault({"cross-stream hazard", "legacy default stream"});
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(free_running);
}

TEST_CASE("atomics count every thread") {
  unsigned* c = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&c), sizeof(unsigned)) == cudaSuccess);
  REQUIRE(cudaMemset(c, 0, sizeof(unsigned)) == cudaSuccess);
  rt::emu_test::count(100000, c, nullptr);
  unsigned got = 0;
  REQUIRE(cudaMemcpy(&got, c, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(got == 100000u);
  cudaFree(c);
}

#else

TEST_CASE("cuda-emu checks") {
  std::printf("SKIPPED: the emulator's own checks run under --config=cuda-emu (not -asan, -tsan)\n");
}

#endif
