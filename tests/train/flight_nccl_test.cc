// The flight recorder on the NCCL path (Note [Flight recorder] in distributed/flight_recorder.h):
// its records come from the NCCL communicator (started: queued on the communication stream;
// ended: the watchdog saw its event, or its abort), not Gloo's thread. Two processes on
// --device cuda, one skipping a bucket's all-reduce (RINGTAPE_FAULT): the launcher names the
// skipped collective. Runs where there are GPUs and under --config=cuda-emu (the NCCL fake);
// elsewhere it prints SKIPPED. Also a killed rank restarted (--max-restarts) and a slow rank
// named (Note [Stragglers] in train/straggler.h, on the device's clock) on NCCL.
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

TEST_CASE("on NCCL, a killed rank: --max-restarts 1 resumes every rank from the checkpoint") {
  // The NCCL path of Note [Elastic restarts] in distributed/local_launcher.cc: the survivor's
  // communicator aborts on the lost peer, no checkpoint is saved after it, the job resumes.
  std::string why;
  if (cuda::device_count(&why) < 1) {
    std::printf("SKIPPED: no CUDA device (%s): restarts on NCCL\n", why.c_str());
    return;
  }
  const fs::path dir = test::fresh_dir("flight_nccl_test_", "restart");
  const std::vector<std::string> args =
      test::tiny_cpu_run(dir / "run", {"--nproc-per-node", "2", "--timeout", "20", "--device", "cuda", "--precision",
                                       "fp32", "--checkpoint-every", "3", "--max-restarts", "1"});
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = test::start(args, dir / "out.txt", {{"RINGTAPE_FAULT", "kill:1:5"}});
  const test::Run r = test::finish(pid, dir / "out.txt", t0, 300s);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(has(r.output, "ringtape launcher: rank 1 failed (signal Killed)"));
  CHECK(has(r.output, "ringtape launcher: restart 1 of at most 1 (rank 1 failed (signal Killed)): resuming from "));
  CHECK(has(r.output, "checkpoint.safetensors at epoch 0, batch 3, step 3"));
  CHECK(has(r.output, "done: 6 steps"));
}

TEST_CASE("on NCCL, a rank slowed in its data phase is named, on the device's clock") {
  std::string why;
  if (cuda::device_count(&why) < 1) {
    std::printf("SKIPPED: no CUDA device (%s): stragglers on NCCL\n", why.c_str());
    return;
  }
  const fs::path dir = test::fresh_dir("flight_nccl_test_", "slow");
  const std::vector<std::string> args =
      test::tiny_cpu_run(dir / "run", {"--nproc-per-node", "2", "--timeout", "60", "--device", "cuda", "--precision",
                                       "fp32", "--epochs", "3", "--print-freq", "2"});
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = test::start(args, dir / "out.txt", {{"RINGTAPE_FAULT", "slow:1:data:300"}});
  const test::Run r = test::finish(pid, dir / "out.txt", t0, 300s);
  INFO(r.output);
  CHECK(r.status == 0);
  // Which step's window first names rank 1 depends on the machine's load: on a busy CPU the
  // emulated first steps of rank 0 are slow too (CI once saw step 14, not 6). The test asks
  // that the slowed rank is named, in its data phase.
  CHECK(has(r.output, ": rank 1 is "));
  CHECK(has(r.output, "% slower than the other ranks' median over the last 6 steps: data "));
  CHECK(has(r.output, "per-rank step time (ms per step over 18 steps):"));
}

}  // namespace
}  // namespace rt
