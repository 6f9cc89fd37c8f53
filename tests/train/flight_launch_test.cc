// The flight recorder through the `ringtape` binary (Note [Flight recorder] in
// distributed/flight_recorder.h, Note [The launcher's analysis] in
// distributed/local_launcher.cc): two CPU processes over Gloo on 127.0.0.1, each run bounded in
// time. Before the recorder, each of these runs printed a timeout or Gloo's own error on one
// rank and nothing about where the ranks parted:
//   - a rank that skips one bucket's all-reduce (RINGTAPE_FAULT): the launcher names it and the
//     collective it skipped; `ringtape analyze` prints the same from the files;
//   - a rank that issues a barrier where the others all-reduce: the disagreement named;
//   - a rank stopped by SIGSTOP: named as stopped, with the collective the other waits in;
//   - SIGUSR1 to the launcher: every rank writes its records and training goes on;
//   - --trace-buffer 0: no records, no analysis.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "distributed/net_util.h"
#include "tests/train/process_util.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::finish;
using test::ringtape;
using test::Run;
using test::start;
using test::tiny_cpu_run;

fs::path tmpdir(const std::string& name) { return test::fresh_dir("flight_launch_test_", name); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Two processes, small buckets (several a step), a short collective timeout; `fault` in RINGTAPE_FAULT.
Run run_two(const fs::path& dir, const std::string& fault, std::vector<std::string> more = {},
            const std::function<void(pid_t)>& during = nullptr) {
  std::vector<std::string> args =
      tiny_cpu_run(dir / "run", {"--nproc-per-node", "2", "--timeout", "4", "--bucket-cap-mb", "0.001"});
  args.insert(args.end(), more.begin(), more.end());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, std::string>> env;
  if (!fault.empty()) env.emplace_back("RINGTAPE_FAULT", fault);
  const pid_t pid = start(args, dir / "out.txt", env);
  if (during) during(pid);
  return finish(pid, dir / "out.txt", t0, 90s);
}

// The launcher's worker process of `rank`: a child of `launcher` with RANK=<rank> in its environment.
pid_t worker_of(pid_t launcher, int rank) {
  const std::string want = "RANK=" + std::to_string(rank);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string stat = test::read_file(e.path() / "stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || stat.find(" " + std::to_string(launcher) + " ", paren) != paren + 3) continue;
    const std::string env = test::read_file(e.path() / "environ");
    for (size_t at = 0; (at = env.find(want, at)) != std::string::npos; ++at)
      if ((at == 0 || env[at - 1] == '\0') && (at + want.size() == env.size() || env[at + want.size()] == '\0'))
        return std::stoi(e.path().filename().string());
  }
  return -1;
}

// The lines of the launcher's analysis.
std::string analysis(const std::string& out) {
  const size_t at = out.find("where the ranks' collectives diverge");
  return at == std::string::npos ? "" : out.substr(at);
}

TEST_CASE("a rank that skips a bucket's all-reduce is named with the collective it skipped, then by ringtape analyze") {
  const fs::path dir = tmpdir("skip");
  const Run r = run_two(dir, "skip-bucket:1:2:0");
  INFO(r.output);
  CHECK(r.status != 0);
  const std::string a = analysis(r.output);
  REQUIRE(!a.empty());
  CHECK(has(a, "ranks disagree on collective #"));
  CHECK(has(a, "rank 1 skipped all_reduce #"));
  CHECK(has(a, "(gradients, bucket 0, step 2, f32 x "));
  // The same from the files, afterwards.
  const Run later = ringtape({"analyze", (dir / "run").string()}, dir / "analyze.txt");
  INFO(later.output);
  CHECK(later.status == 0);
  const size_t line = a.find("  ranks disagree");
  REQUIRE(line != std::string::npos);
  CHECK(has(later.output, a.substr(line + 2, a.find('\n', line) - line - 2)));
  CHECK(has(later.output, "collectives recorded, written: by the launcher when rank 0 failed"));
  CHECK(fs::exists(dir / "run" / "logs" / "flight-rank-0.json"));
  CHECK(fs::exists(dir / "run" / "logs" / "flight-rank-1.json"));
}

TEST_CASE("two nodes: node 0's launcher merges node 1's records into its analysis") {
  // Two launchers of one process each on 127.0.0.1 (Note [The launcher's analysis]): rank 1,
  // on node 1, skips a bucket; node 0's launcher sees only its own ring and reads rank 1's
  // records from the run directory node 1's launcher writes them to.
  const fs::path dir = tmpdir("nodes");
  const std::string port = std::to_string(dist::net::local_port(dist::net::listen_tcp("127.0.0.1", 0).get()));
  std::vector<pid_t> pids;
  const auto t0 = std::chrono::steady_clock::now();
  for (int node = 0; node < 2; ++node)
    pids.push_back(start(tiny_cpu_run(dir / "run", {"--nnodes", "2", "--node-rank", std::to_string(node),
                                                    "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
                                                    "--master-port", port, "--timeout", "4", "--bucket-cap-mb",
                                                    "0.001"}),
                         dir / ("node" + std::to_string(node) + ".txt"), {{"RINGTAPE_FAULT", "skip-bucket:1:2:0"}}));
  const Run n0 = finish(pids[0], dir / "node0.txt", t0, 90s), n1 = finish(pids[1], dir / "node1.txt", t0, 90s);
  INFO(n0.output);
  INFO(n1.output);
  CHECK(n0.status != 0);
  CHECK(n1.status != 0);
  for (const Run* n : {&n0, &n1}) {
    const std::string a = analysis(n->output);
    CHECK(has(a, "rank 1 skipped all_reduce #"));
    CHECK_FALSE(has(a, "no flight records from"));
  }
}

TEST_CASE("ranks that issue different collectives are named with both") {
  const fs::path dir = tmpdir("barrier");
  const Run r = run_two(dir, "barrier-for-bucket:1:2:0");
  INFO(r.output);
  CHECK(r.status != 0);
  const std::string a = analysis(r.output);
  CHECK(has(a, "ranks disagree on collective #"));
  CHECK(has(a, "rank 1 issued barrier (gradients, bucket 0, step 2, "));
  CHECK(has(a, "rank 0 issued all_reduce (gradients, bucket 0, step 2, f32 x "));
}

TEST_CASE("a stopped rank is named as stopped, with the collective the other waits in") {
  const fs::path dir = tmpdir("stop");
  const auto t0 = std::chrono::steady_clock::now();
  double to_analysis = -1;  // seconds from the stop to the printed analysis
  const Run r = run_two(dir, "", {"--epochs", "1000"}, [&](pid_t launcher) {
    // Once training runs (step 5 logged), stop rank 1.
    while (!has(test::read_file(dir / "run" / "metrics.jsonl"), "\"step\":5,")) {
      REQUIRE(std::chrono::steady_clock::now() - t0 < 60s);
      std::this_thread::sleep_for(20ms);
    }
    const pid_t rank1 = worker_of(launcher, 1);
    REQUIRE(rank1 > 0);
    REQUIRE(kill(rank1, SIGSTOP) == 0);
    const auto stopped = std::chrono::steady_clock::now();
    while (analysis(test::read_file(dir / "out.txt")).empty()) {
      REQUIRE(std::chrono::steady_clock::now() - stopped < 60s);
      std::this_thread::sleep_for(20ms);
    }
    to_analysis = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  });
  INFO(r.output);
  CHECK(r.status != 0);
  const std::string a = analysis(r.output);
  CHECK(has(a, "rank 1: stopped (SIGSTOP, or a debugger), still alive"));
  CHECK((has(a, "rank 1 never entered ") || has(a, "rank 1 did not complete it")));
  // Its stacks, read by the launcher (Note [Stacks of a stuck rank]): in its log, and its main
  // thread's place in ringtape's own code quoted.
  CHECK(has(a, "rank 1's main thread is in "));
  const std::string log1 = test::read_file(dir / "run" / "logs" / "rank-1.log");
  CHECK(has(log1, "---- rank 1's threads (pid "));
  CHECK(has(log1, " at train/"));  // a frame of the trainer, with its file:line
  MESSAGE("from SIGSTOP to the printed analysis: ", to_analysis, " s (--timeout 4)");
}

TEST_CASE("SIGUSR1 to the launcher: every rank writes its records and training goes on; --trace-buffer 0: none") {
  const fs::path dir = tmpdir("usr1");
  const auto t0 = std::chrono::steady_clock::now();
  const Run r = run_two(dir, "", {"--epochs", "40"}, [&](pid_t launcher) {
    while (!has(test::read_file(dir / "run" / "metrics.jsonl"), "\"step\":3,")) {
      REQUIRE(std::chrono::steady_clock::now() - t0 < 60s);
      std::this_thread::sleep_for(20ms);
    }
    kill(launcher, SIGUSR1);
    while (!(fs::exists(dir / "run" / "logs" / "flight-rank-0.json") &&
             fs::exists(dir / "run" / "logs" / "flight-rank-1.json"))) {
      REQUIRE(std::chrono::steady_clock::now() - t0 < 60s);
      std::this_thread::sleep_for(20ms);
    }
  });
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(has(r.output, "done: 240 steps"));
  for (const char* f : {"flight-rank-0.json", "flight-rank-1.json"}) {
    const std::string text = test::read_file(dir / "run" / "logs" / f);
    CHECK(has(text, "\"reason\":\"SIGUSR1\""));
    CHECK(has(text, "\"purpose\":\"gradients\""));
  }

  const fs::path off = tmpdir("off");
  const Run o = run_two(off, "skip-bucket:1:2:0", {"--trace-buffer", "0"});
  INFO(o.output);
  CHECK(o.status != 0);
  CHECK(analysis(o.output).empty());
  CHECK_FALSE(fs::exists(off / "run" / "logs" / "flight-rank-0.json"));
}

TEST_CASE("ranks started without ringtape's launcher: the stuck rank writes its stacks when the other times out") {
  // Two ranks started by hand with torchrun's variables
  // (Note [Stacks of a rank without ringtape's launcher] in distributed/stack_dump.h). Rank 1
  // sleeps 60 s in its first step's data phase (alive, its liveness thread running); rank 0
  // times out in the gradient all-reduce after 3 s and asks rank 1 for its stacks, which rank 1
  // writes to its log with its records.
  const fs::path dir = tmpdir("torchrun");
  const int port = dist::net::local_port(dist::net::listen_tcp("127.0.0.1", 0).get());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    auto env = test::torchrun_env(port, rank, 2);
    env.emplace_back("RINGTAPE_FAULT", "slow:1:data:60000");
    pids.push_back(start(tiny_cpu_run(dir / "run", {"--timeout", "3", "--threads", "1"}),
                         dir / ("rank" + std::to_string(rank) + ".txt"), env));
  }
  const Run r0 = finish(pids[0], dir / "rank0.txt", t0, 90s);
  INFO(r0.output);
  CHECK(r0.status != 0);
  CHECK(has(r0.output, "timed out (timeout 3.0 s)"));
  // Rank 1 answers within moments of rank 0's timeout; then it is stopped here.
  const fs::path json1 = dir / "run" / "logs" / "flight-rank-1.json";
  while (!fs::exists(json1) && std::chrono::steady_clock::now() - t0 < 60s) std::this_thread::sleep_for(50ms);
  kill(-pids[1], SIGKILL);
  const Run r1 = finish(pids[1], dir / "rank1.txt", t0, 90s);
  INFO(r1.output);
  const std::string log1 = test::read_file(dir / "run" / "logs" / "rank-1.log");
  CHECK(has(log1, "---- rank 1's threads (pid "));
  CHECK(has(log1, "read when rank 0's collective timed out ----"));
  CHECK(has(log1, "rt::dist::inject_phase_delay(int, char const*)"));  // the sleep
  CHECK(has(log1, "rt::train::TrainStep::run_eager(rt::data::DeviceFeeder&, rt::train::Progress const&) at "
                  "train/step.cc:"));
  const std::string records = test::read_file(json1);
  CHECK(has(records, "\"reason\":\"asked when rank 0's collective timed out\""));
  CHECK(has(records, "\"main_thread\":\"train/step.cc:"));  // the innermost frame in ringtape's own code
  // `ringtape analyze` quotes the stuck rank's main thread.
  const Run later = ringtape({"analyze", (dir / "run").string()}, dir / "analyze.txt");
  INFO(later.output);
  CHECK(has(later.output, "rank 1's main thread is in train/step.cc:"));
}

}  // namespace
}  // namespace rt
