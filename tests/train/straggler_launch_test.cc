// A slow rank named through the `ringtape` binary (Note [Stragglers] in train/straggler.h):
// three CPU processes over Gloo on 127.0.0.1, rank 1 sleeping 40 ms in every step's data
// phase (RINGTAPE_FAULT=slow:1:data:40). Before the phase times, the log showed only the
// job's img/s falling: every rank's step took as long, the slow one's wait being the others'.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/train/process_util.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("a rank slowed in its data phase is named with that phase; the table and TensorBoard have every rank") {
  const fs::path dir = test::fresh_dir("straggler_launch_test_", "slow");
  const std::vector<std::string> args =
      test::tiny_cpu_run(dir / "run", {"--nproc-per-node", "3", "--threads", "1", "--epochs", "3", "--print-freq", "2",
                                       "--tensorboard", "--timeout", "30"});
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = test::start(args, dir / "out.txt", {{"RINGTAPE_FAULT", "slow:1:data:40"}});
  const test::Run r = test::finish(pid, dir / "out.txt", t0, 120s);
  INFO(r.output);
  REQUIRE(r.status == 0);
  // 12 steps, windows of 2: named after the third window (step 6), again after the sixth (step 12).
  CHECK(has(r.output, "step 6: rank 1 is "));
  CHECK(has(r.output, "% slower than the other ranks' median over the last 6 steps: data "));
  CHECK(has(r.output, "step 12: rank 1 is "));
  CHECK_FALSE(has(r.output, ": rank 0 is "));
  CHECK(has(r.output, "per-rank step time (ms per step over 12 steps):"));
  const std::string metrics = test::read_file(dir / "run" / "metrics.jsonl");
  CHECK(has(metrics, "{\"type\":\"straggler\",\"epoch\":1,\"step\":6,\"message\":\"rank 1 is "));
  CHECK(has(metrics, "{\"type\":\"ranks\",\"steps\":12,\"data_ms\":["));
  // The table's data column: rank 1 waited 40 ms or more per step, the others less than 20.
  const size_t row = r.output.find("\n     1 ", r.output.find("per-rank step time"));
  REQUIRE(row != std::string::npos);
  CHECK(std::stod(r.output.substr(row + 8, 10)) >= 40.0);
  for (const char* other : {"\n     0 ", "\n     2 "}) {
    const size_t at = r.output.find(other, r.output.find("per-rank step time"));
    REQUIRE(at != std::string::npos);
    CHECK(std::stod(r.output.substr(at + 8, 10)) < 20.0);
  }
  std::string events;
  for (const auto& e : fs::directory_iterator(dir / "run" / "tensorboard")) events += test::read_file(e.path());
  for (const char* tag :
       {"ranks/rank_0/data_ms", "ranks/rank_1/data_ms", "ranks/rank_2/comm_ms", "ranks/rank_1/busy_ms"})
    CHECK(has(events, tag));
}

}  // namespace
}  // namespace rt
