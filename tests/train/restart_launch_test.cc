// Elastic restarts through the `ringtape` binary (Note [Elastic restarts] in
// distributed/local_launcher.cc): CPU processes over Gloo on 127.0.0.1, each run bounded in
// time. Before --max-restarts, each of these jobs ended at its first failure.
//   - a rank killed mid-epoch (RINGTAPE_FAULT=kill:1:5) with --max-restarts 1: the job resumes
//     from its last checkpoint and ends with the weights, bit for bit, of the same job stopped
//     there and resumed by hand; metrics.jsonl holds every step once;
//   - two nodes: node 1's launcher killed and started again; both finish, with the same weights;
//   - two nodes: node 1's launcher killed and not started again: node 0 ends naming it.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "distributed/net_util.h"
#include "tests/train/process_util.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::Run;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// 2 ranks x 6 steps per epoch x 3 epochs, a checkpoint every 3 steps.
std::vector<std::string> job(const fs::path& dir, std::vector<std::string> more) {
  std::vector<std::string> a =
      test::tiny_cpu_run(dir, {"--epochs", "3", "--threads", "1", "--checkpoint-every", "3", "--timeout", "10"});
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

Run run(const std::vector<std::string>& args, const fs::path& out, const std::string& fault) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, std::string>> env;
  if (!fault.empty()) env.emplace_back("RINGTAPE_FAULT", fault);
  return test::finish(test::start(args, out, env), out, t0, 120s);
}

// How many "train" records metrics.jsonl holds for each step.
std::map<int, int> train_records(const fs::path& metrics) {
  std::map<int, int> n;
  const std::string text = test::read_file(metrics);
  for (size_t at = 0; (at = text.find("{\"type\":\"train\"", at)) != std::string::npos; ++at) {
    const size_t s = text.find("\"step\":", at) + 7;
    ++n[std::stoi(text.substr(s))];
  }
  return n;
}

void check_every_step_once(const fs::path& metrics, int steps) {
  const std::map<int, int> n = train_records(metrics);
  CHECK(int(n.size()) == steps);
  for (const auto& [step, count] : n) {
    INFO("step ", step);
    CHECK(count == 1);
  }
}

TEST_CASE("a rank killed mid-epoch: the job restarts from its checkpoint and ends as the hand-resumed job") {
  const fs::path dir = test::fresh_dir("restart_launch_test_", "kill");
  const Run a =
      run(job(dir / "elastic", {"--nproc-per-node", "2", "--max-restarts", "1"}), dir / "elastic.txt", "kill:1:5");
  INFO(a.output);
  REQUIRE(a.status == 0);
  CHECK(has(a.output, "ringtape launcher: rank 1 failed (signal Killed); stopping the other workers"));
  CHECK(has(a.output, "ringtape launcher: restart 1 of at most 1 (rank 1 failed (signal Killed)): resuming from " +
                          (dir / "elastic" / "checkpoint.safetensors").string()));
  CHECK(has(a.output, "restart 1 by the launcher (rank 1 failed (signal Killed)): from "));
  CHECK(has(a.output, "checkpoint.safetensors, step 3"));
  // Step 4's record (and any later one the killed round wrote) moved aside; every step once.
  check_every_step_once(dir / "elastic" / "metrics.jsonl", 18);
  CHECK(has(test::read_file(dir / "elastic" / "logs" / "metrics-replaced.jsonl"), "\"step\":4,"));
  CHECK(has(test::read_file(dir / "elastic" / "metrics.jsonl"), "{\"type\":\"restart\",\"round\":1,"));

  // The same job without restarts fails at step 5 and keeps its step-3 checkpoint; resumed by hand.
  const Run b = run(job(dir / "hand", {"--nproc-per-node", "2"}), dir / "hand.txt", "kill:1:5");
  INFO(b.output);
  CHECK(b.status != 0);
  CHECK_FALSE(has(b.output, "restart 1"));
  const Run c =
      run(job(dir / "hand", {"--nproc-per-node", "2", "--resume", (dir / "hand" / "checkpoint.safetensors").string()}),
          dir / "hand_resumed.txt", "");
  INFO(c.output);
  REQUIRE(c.status == 0);
  CHECK(
      has(c.output, "resumed " + (dir / "hand" / "checkpoint.safetensors").string() + " at epoch 0, batch 3, step 3"));
  const std::vector<float> elastic = test::weights(dir / "elastic" / "model.safetensors");
  CHECK(!elastic.empty());
  CHECK(elastic == test::weights(dir / "hand" / "model.safetensors"));
  check_every_step_once(dir / "hand" / "metrics.jsonl", 18);
}

// Two launchers of one process each on 127.0.0.1; rank 0 sleeps 100 ms per step so that the job
// is still running when node 1's launcher is killed (after step 4: a checkpoint at step 3).
struct TwoNodes {
  fs::path dir;
  std::string port;
  std::vector<std::string> args(int node) const {
    return job(dir / "run",
               {"--nnodes", "2", "--node-rank", std::to_string(node), "--nproc-per-node", "1", "--master-addr",
                "127.0.0.1", "--master-port", port, "--max-restarts", "1", "--rdzv-timeout", node == 0 ? "8" : "60"});
  }
  pid_t start(int node, const std::string& name) const {
    return test::start(args(node), dir / name, {{"RINGTAPE_FAULT", "slow:0:data:100"}});
  }
  void kill_node1_after_step4(pid_t n1) const {
    const auto t0 = std::chrono::steady_clock::now();
    while (!has(test::read_file(dir / "run" / "metrics.jsonl"), "\"step\":4,")) {
      REQUIRE(std::chrono::steady_clock::now() - t0 < 60s);
      std::this_thread::sleep_for(20ms);
    }
    kill(n1, SIGKILL);  // the launcher alone: its worker dies with it (PR_SET_PDEATHSIG)
    int status = 0;
    waitpid(n1, &status, 0);
  }
};

TwoNodes two_nodes(const std::string& name) {
  TwoNodes t;
  t.dir = test::fresh_dir("restart_launch_test_", name);
  // Two free ports in a row: the workers' store and the launchers' (master port + 1).
  for (int tries = 0; tries < 50 && t.port.empty(); ++tries) {
    const int p = dist::net::local_port(dist::net::listen_tcp("127.0.0.1", 0).get());
    if (p < 65535) {
      try {
        dist::net::listen_tcp("127.0.0.1", p + 1);
        t.port = std::to_string(p);
      } catch (const std::exception&) {
      }
    }
  }
  REQUIRE(!t.port.empty());
  return t;
}

TEST_CASE("two nodes: node 1's launcher killed and started again; both finish with the uninterrupted weights") {
  const TwoNodes t = two_nodes("again");
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t n0 = t.start(0, "node0.txt");
  t.kill_node1_after_step4(t.start(1, "node1_first.txt"));
  const pid_t n1 = t.start(1, "node1_again.txt");
  const Run r0 = test::finish(n0, t.dir / "node0.txt", t0, 120s);
  const Run r1 = test::finish(n1, t.dir / "node1_again.txt", t0, 120s);
  INFO(r0.output);
  INFO(r1.output);
  CHECK(r0.status == 0);
  CHECK(r1.status == 0);
  // Whichever launcher asked first, round 1 resumed from the run's checkpoint.
  CHECK(has(r0.output + r1.output, "restart 1 of at most 1 ("));
  CHECK(has(r0.output, "restart 1 by the launcher ("));
  check_every_step_once(t.dir / "run" / "metrics.jsonl", 18);
  // The same two ranks' uninterrupted job (one node, two processes): resuming is exact.
  const Run u = run(job(t.dir / "straight", {"--nproc-per-node", "2"}), t.dir / "straight.txt", "");
  INFO(u.output);
  REQUIRE(u.status == 0);
  CHECK(test::weights(t.dir / "run" / "model.safetensors") == test::weights(t.dir / "straight" / "model.safetensors"));
}

TEST_CASE("two nodes: node 1's launcher killed and not started again: node 0 ends naming it after --rdzv-timeout") {
  const TwoNodes t = two_nodes("gone");
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t n0 = t.start(0, "node0.txt");
  t.kill_node1_after_step4(t.start(1, "node1.txt"));
  const Run r0 = test::finish(n0, t.dir / "node0.txt", t0, 120s);
  INFO(r0.output);
  CHECK(r0.status != 0);
  CHECK(has(r0.output,
            "ringtape launcher: cannot restart: launcher: node 1 did not join round 1 within 8 s "
            "(--rdzv-timeout)"));
}

}  // namespace
}  // namespace rt
