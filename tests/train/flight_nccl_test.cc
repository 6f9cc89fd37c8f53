// The flight recorder on the NCCL path (Note [Flight recorder] in distributed/flight_recorder.h):
// its records come from the NCCL communicator (started: queued on the communication stream;
// ended: the watchdog saw its event, or its abort), not Gloo's thread. Two processes on
// --device cuda, one skipping a bucket's all-reduce (RINGTAPE_FAULT): the launcher names the
// skipped collective. Runs where there are GPUs and under --config=cuda-emu (the NCCL fake);
// elsewhere it prints SKIPPED.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/cuda/runtime.h"
#include "tests/train/process_util.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("on NCCL, a rank that skips a bucket's all-reduce is named with the collective it skipped") {
  std::string why;
  if (cuda::device_count(&why) < 1) {
    std::printf("SKIPPED: no CUDA device (%s): flight records on NCCL\n", why.c_str());
    return;
  }
  const fs::path dir = test::fresh_dir("flight_nccl_test_", "skip");
  std::vector<std::string> args =
      test::tiny_cpu_run(dir / "run", {"--nproc-per-node", "2", "--timeout", "20", "--bucket-cap-mb", "0.001",
                                       "--device", "cuda", "--precision", "fp32"});
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = test::start(args, dir / "out.txt", {{"RINGTAPE_FAULT", "skip-bucket:1:2:0"}});
  const test::Run r = test::finish(pid, dir / "out.txt", t0, 300s);
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(has(r.output, "where the ranks' collectives diverge"));
  CHECK(has(r.output, "rank 1 skipped all_reduce #"));
  CHECK(has(r.output, "(gradients, bucket 0, step 2, f32 x "));
  CHECK(fs::exists(dir / "run" / "logs" / "flight-rank-1.json"));
}

}  // namespace
}  // namespace rt
