// The thread orders of RINGTAPE_EMU_SCHEDULE (Note [Thread order] in cuda_emu/executor.cc),
// one per test target (tests/cuda_emu/BUILD sets the variable): a block of 256 threads each
// adding 1 to a counter with a plain load and store (tests/cuda_emu/planted.cu count_racy)
// counts right when each thread runs until it waits (shuffle, reverse: the bug hides) and
// loses updates when threads are switched at accesses (interleave: all of them; random:
// some), which a GPU-vs-CPU comparison then fails on; a fault's report names the schedule.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/cuda_emu/planted.h"

#if RINGTAPE_CUDA_EMU && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#include "cuda_emu/emu.h"

namespace {

std::string schedule() {
  const char* v = std::getenv("RINGTAPE_EMU_SCHEDULE");
  return v && *v ? v : "shuffle";
}

unsigned count_with(bool racy, int64_t n) {
  unsigned* counter = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(unsigned)) == cudaSuccess);
  REQUIRE(cudaMemset(counter, 0, sizeof(unsigned)) == cudaSuccess);
  if (racy) rt::emu_test::count_racy(n, counter, nullptr);
  else rt::emu_test::count(n, counter, nullptr);
  unsigned out = 0;
  REQUIRE(cudaMemcpy(&out, counter, sizeof out, cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(counter);
  return out;
}

TEST_CASE("a plain read-modify-write by every thread of a block: lost updates only where threads interleave") {
  const std::string s = schedule();
  INFO("RINGTAPE_EMU_SCHEDULE=", s);
  CHECK(count_with(false, 256) == 256);  // atomics count every thread under any order
  const unsigned racy = count_with(true, 256);
  if (s == "shuffle" || s == "reverse") CHECK(racy == 256);  // one block runs each thread to its end: hidden
  if (s == "interleave") CHECK(racy == 1);  // every thread reads 0 before any writes
  if (s == "random") {
    CHECK(racy < 256);
    CHECK(racy >= 1);
  }
}

TEST_CASE("a fault's report names the schedule and seed that reproduce it") {
  float* y = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&y), 64 * sizeof(float)) == cudaSuccess);
  try {
    rt::emu_test::shared_read(16, 40, y, nullptr);  // reads a never-written shared slot
  } catch (const std::exception&) {
  }
  CHECK(cudaDeviceSynchronize() != cudaSuccess);
  const std::string report = rt::emu::last_fault();
  CHECK_MESSAGE(report.find("thread order: RINGTAPE_EMU_SCHEDULE=" + schedule() + " RINGTAPE_EMU_SEED=") !=
                    std::string::npos,
                report);
  rt::emu::clear_faults();
  cudaFree(y);
}

}  // namespace

#else
TEST_CASE("schedules") { MESSAGE("the thread orders are the emulator's: run with --config=cuda-emu"); }
#endif
