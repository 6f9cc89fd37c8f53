// Launching, rendezvous and the run's files of data-parallel training, through the `ringtape`
// binary as a user runs it (CPU processes over Gloo on 127.0.0.1, each run bounded in time).
// Each case failed before its fix (issue 21's findings):
//   - a second job on a running job's --master-port fails alone, naming the rank it found
//     taken; the running job finishes (Note [Rank claims], distributed/rendezvous.cc);
//   - ranks with different communication flags stop naming the flag
//     (Note [Same flags on every rank]); logs/rank-K.log holds the rank's opening lines and
//     its fatal error (Note [Whole rank logs]);
//   - a second run into a directory a live run writes is refused, naming the
//     holder (Note [One run per directory]);
//   - --nproc-per-node inside another launcher's environment is refused at
//     once (Note [Who starts the ranks]);
//   - two launchers as two "nodes" (2 processes each) train like one process with the
//     global batch; a SIGTERM to node 1's launcher stops every rank at one step, and rank 0
//     saves a checkpoint that resumes (Note [Stopping together], train/trainer.cc).
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
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
using test::tiny_cpu_run;
using test::Run;
using test::start;

fs::path tmpdir(const std::string& name) { return test::fresh_dir("data_parallel_launch_test_", name); }

int free_port() { return dist::net::local_port(dist::net::listen_tcp("127.0.0.1", 0).get()); }


// Waits until `file` exists (a run got going), at most `limit`.
bool wait_for_file(const fs::path& file, std::chrono::seconds limit = 30s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(file)) {
    if (std::chrono::steady_clock::now() - t0 > limit) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// Before: the second job's rank 1 reached the first job's store and took part in its
// rendezvous; the first job trained to its end, then waited out --timeout at its last
// barrier and exited 1 (4 of 4 tries).
TEST_CASE("a second job on a running job's --master-port fails alone; the running job finishes") {
  const fs::path dir = tmpdir("port");
  const std::string port = std::to_string(free_port());
  const auto t0 = std::chrono::steady_clock::now();
  // 150 epochs of 6 steps: long enough (about 25 s here) for the others to come and go.
  const pid_t first = start(tiny_cpu_run(dir / "first", {"--nproc-per-node", "2", "--master-port", port, "--epochs", "150",
                                                 "--timeout", "10"}),
                            dir / "first.txt");
  REQUIRE(wait_for_file(dir / "first" / "metrics.jsonl"));
  // A rank 1 alone, which always reaches the running job's store; then a whole second job
  // (its rank 0 fails to bind; whether its rank 1 reaches the store before its launcher
  // stops it is a race).
  const auto t1 = std::chrono::steady_clock::now();
  const pid_t intruder = start(tiny_cpu_run(dir / "third", {"--timeout", "10"}), dir / "third.txt",
                               test::torchrun_env(std::stoi(port), 1, 2));
  const Run third = finish(intruder, dir / "third.txt", t1);
  const Run second = ringtape(tiny_cpu_run(dir / "second", {"--nproc-per-node", "2", "--master-port", port, "--timeout", "10"}),
                              dir / "second.txt");
  const bool first_was_running = kill(first, 0) == 0 && !fs::exists(dir / "first" / "model.safetensors");
  const Run one = finish(first, dir / "first.txt", t0, 180s);
  INFO("first job:\n" << one.output);
  INFO("second job:\n" << second.output);
  INFO("a rank 1 alone:\n" << third.output);
  CHECK(second.status != 0);
  CHECK(third.status != 0);
  CHECK(third.seconds < 5);
  CHECK(third.output.find("rank 1 of the job whose store is at 127.0.0.1:" + port + " is already taken (by pid") !=
        std::string::npos);
  CHECK(first_was_running);  // else the case proved nothing: lengthen the first job
  CHECK(one.status == 0);
  CHECK(one.output.find("step 900/900") != std::string::npos);
}

// Before: another --bucket-cap-mb ended a rank in a Gloo assertion (exit 134), another
// --allreduce hung both ranks until --timeout; and rank-1.log held neither the opening lines
// nor the error.
TEST_CASE("ranks with different communication flags stop naming the flag; the rank's log holds its error") {
  struct Case {
    const char* flag;
    const char* rank0;
    const char* rank1;
  };
  for (const Case c : {Case{"--bucket-cap-mb", "1", "2"}, Case{"--allreduce", "ring", "tree"}}) {
    CAPTURE(c.flag);
    const fs::path dir = tmpdir(std::string("flags") + c.flag);
    const int port = free_port();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<pid_t> pids;
    for (int r = 0; r < 2; ++r)
      pids.push_back(start(tiny_cpu_run(dir / "run", {c.flag, r == 0 ? c.rank0 : c.rank1, "--timeout", "10"}),
                           dir / ("rank" + std::to_string(r) + ".txt"), test::torchrun_env(port, r, 2)));
    const Run r0 = finish(pids[0], dir / "rank0.txt", t0), r1 = finish(pids[1], dir / "rank1.txt", t0);
    INFO(r0.output);
    INFO(r1.output);
    const std::string said = std::string("rank 1 runs with ") + c.flag + " " + c.rank1 + " but rank 0 with " + c.flag +
                             " " + c.rank0;
    CHECK(r1.status == 2);
    CHECK(r1.output.find(said) != std::string::npos);
    CHECK(r1.seconds < 10);
    const std::string log = test::read_file(dir / "run" / "logs" / "rank-1.log");
    CHECK_MESSAGE(log.find(said) != std::string::npos, log);             // the fatal error
    CHECK_MESSAGE(log.find("precision auto:") != std::string::npos, log);  // the opening lines
  }
}

// Before: both runs exited 0 and metrics.jsonl interleaved their steps.
TEST_CASE("a second run into a directory a live run writes is refused, naming the holder") {
  const fs::path dir = tmpdir("lock");
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t first = start(tiny_cpu_run(dir / "run", {"--epochs", "1000", "--checkpoint-every", "1"}), dir / "first.txt");
  REQUIRE(wait_for_file(dir / "run" / "checkpoint.safetensors"));
  const Run second = ringtape(tiny_cpu_run(dir / "run", {"--resume", (dir / "run" / "checkpoint.safetensors").string()}),
                              dir / "second.txt");
  kill(first, SIGTERM);
  const Run one = finish(first, dir / "first.txt", t0);
  INFO(second.output);
  INFO(one.output);
  CHECK(second.status == 2);
  CHECK(second.output.find("is in use by a run that is still going (pid " + std::to_string(first) + " on ") !=
        std::string::npos);
  CHECK(one.status == 128 + SIGTERM);
  // The lock went with its run: resuming now works.
  const Run third = ringtape(tiny_cpu_run(dir / "run", {"--resume", (dir / "run" / "checkpoint.safetensors").string(),
                                                "--epochs", "1000", "--steps", "1"}),
                             dir / "third.txt");
  INFO(third.output);
  CHECK(third.status == 0);
}

// Before: the flag was ignored and the process waited --timeout for a rank nobody started.
TEST_CASE("--nproc-per-node in a process another launcher made one rank of several is refused at once") {
  const fs::path dir = tmpdir("nested");
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t p = start(tiny_cpu_run(dir / "run", {"--nproc-per-node", "2", "--timeout", "20"}), dir / "out.txt",
                        test::torchrun_env(free_port(), 0, 2));
  const Run r = finish(p, dir / "out.txt", t0);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.seconds < 10);
  CHECK(r.output.find("but this process already is rank 0 of 2") != std::string::npos);
  CHECK(r.output.find("Drop --nproc-per-node, --nnodes and --max-restarts") != std::string::npos);
  // Slurm's variables (an sbatch script with --ntasks 2) say the same.
  const pid_t q = start(tiny_cpu_run(dir / "run2", {"--nproc-per-node", "2", "--timeout", "20"}), dir / "out2.txt",
                        {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                         {"SLURM_TASKS_PER_NODE", "2"}, {"SLURM_JOB_NODELIST", "localhost"},
                         {"SLURM_JOB_ID", "4242"}, {"MASTER_PORT", std::to_string(free_port())}});
  const Run s = finish(q, dir / "out2.txt", std::chrono::steady_clock::now());
  INFO(s.output);
  CHECK(s.status == 2);
  CHECK(s.output.find("SLURM_PROCID and SLURM_NTASKS") != std::string::npos);
}

// Rank 0 of 1 under torchrun's variables trains data parallel (DataParallel, the reducer, Gloo
// here, NCCL on a GPU: what the GPU check runs on one GPU) and equals one process bit for bit:
// at world 1 the all-reduce hands the gradients back as they were, and on the CPU SyncBN's
// statistics from the one gathered block equal batch norm's own (on a GPU its kernels differ:
// the GPU check allows 1e-4 there). Before, such a process trained alone (SingleProcess). See
// Note [World 1 under a launcher] in train/trainer.cc.
TEST_CASE("rank 0 of 1 under torchrun's variables trains data parallel, equal to one process") {
  const fs::path dir = tmpdir("world1");
  struct Case {
    std::string name;
    std::vector<std::string> flags;
    double bound;  // 0: bit for bit
  };
  for (const Case& c : {Case{"fp32", {}, 0}, Case{"accum", {"--accum-steps", "2"}, 0}, Case{"syncbn", {"--sync-bn"}, 0}}) {
    CAPTURE(c.name);
    std::vector<std::string> more = {"--no-shuffle", "--steps", "3"};
    more.insert(more.end(), c.flags.begin(), c.flags.end());
    const Run one = ringtape(tiny_cpu_run(dir / (c.name + "_one"), more), dir / (c.name + "_one.txt"));
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t p = start(tiny_cpu_run(dir / (c.name + "_dp"), more), dir / (c.name + "_dp.txt"),
                          test::torchrun_env(free_port(), 0, 1));
    const Run dp = finish(p, dir / (c.name + "_dp.txt"), t0);
    INFO(one.output);
    INFO(dp.output);
    REQUIRE(one.status == 0);
    REQUIRE(dp.status == 0);
    CHECK(dp.output.find("data parallel: rank 0 of 1 (gloo") != std::string::npos);
    const fs::path a = dir / (c.name + "_dp") / "model.safetensors",
                   b = dir / (c.name + "_one") / "model.safetensors";
    if (c.bound == 0) {
      CHECK(test::weights(a) == test::weights(b));
    } else {
      std::string which;
      const double d = test::worst_relative(a, b, which);
      MESSAGE(c.name, ": world 1 vs one process: ", d, " (", which, ")");
      CHECK_MESSAGE(d <= c.bound, which, " differs by ", d);
    }
  }
}

// Deliverable: two launchers (--nnodes 2, 2 processes each) on this machine equal one process
// with the global batch of 32 (--sync-bn, no shuffling: bound as in data_parallel_test's
// --sync-bn case). Then a SIGTERM to node 1's launcher: no rank there claims a checkpoint.
TEST_CASE("two nodes of two processes train like one process with the global batch; SIGTERM on node 1") {
  const fs::path dir = tmpdir("nodes");
  auto nodes = [&](const std::string& name, std::vector<std::string> more) {
    const std::string port = std::to_string(free_port());
    std::vector<pid_t> pids;
    const auto t0 = std::chrono::steady_clock::now();
    for (int node = 0; node < 2; ++node) {
      std::vector<std::string> args = tiny_cpu_run(dir / name, {"--nproc-per-node", "2", "--nnodes", "2", "--node-rank",
                                                        std::to_string(node), "--master-addr", "127.0.0.1",
                                                        "--master-port", port, "--timeout", "20"});
      args.insert(args.end(), more.begin(), more.end());
      pids.push_back(start(args, dir / (name + std::to_string(node) + ".txt")));
    }
    return std::make_pair(pids, t0);
  };
  auto [pids, t0] = nodes("two", {"--no-shuffle", "--sync-bn", "--steps", "3"});
  const Run n0 = finish(pids[0], dir / "two0.txt", t0, 90s), n1 = finish(pids[1], dir / "two1.txt", t0, 90s);
  INFO(n0.output);
  INFO(n1.output);
  REQUIRE(n0.status == 0);
  REQUIRE(n1.status == 0);
  CHECK(n0.output.find("global batch 32 = 4 process(es) x batch 8") != std::string::npos);
  std::vector<std::string> one_args = tiny_cpu_run(dir / "one", {"--no-shuffle", "--steps", "3"});
  one_args[std::find(one_args.begin(), one_args.end(), "--batch-size") - one_args.begin() + 1] = "32";
  const Run one = ringtape(one_args, dir / "one.txt");
  INFO(one.output);
  REQUIRE(one.status == 0);
  std::string which;
  const double d = test::worst_relative(dir / "two" / "model.safetensors", dir / "one" / "model.safetensors", which);
  MESSAGE("2 nodes x 2 processes x batch 8 vs 1 x 32 (--sync-bn): ", d, " (", which, ")");
  CHECK_MESSAGE(d <= 1e-4, which, " differs by ", d, " of its largest value");

  // SIGTERM to node 1's launcher once training runs (Note [Stopping together]). Before: node
  // 1's ranks stopped at their own step boundaries, node 0's failed in a collective their peers
  // had left, and rank 0 died without a checkpoint (earlier still, node 1's ranks printed
  // "checkpoint saved" although only rank 0 saves). Now every rank stops at the same step and
  // rank 0 saves the checkpoint, which resumes.
  auto [stopped, t1] = nodes("term", {"--epochs", "1000"});
  // Step 2 logged: every rank has finished step 1, so each has its signal handler (a rank
  // still setting up would end by SIGTERM's default action, claiming nothing either).
  const auto t2 = std::chrono::steady_clock::now();
  while (test::read_file(dir / "term" / "metrics.jsonl").find("\"step\":2,") == std::string::npos) {
    REQUIRE(std::chrono::steady_clock::now() - t2 < 60s);
    std::this_thread::sleep_for(20ms);
  }
  kill(stopped[1], SIGTERM);
  const Run s1 = finish(stopped[1], dir / "term1.txt", t1, 60s), s0 = finish(stopped[0], dir / "term0.txt", t1, 60s);
  INFO(s0.output);
  INFO(s1.output);
  CHECK(s1.status == 128 + SIGTERM);
  CHECK(s0.status != 0);  // its ranks stopped too, by node 1's signal
  const std::string log0 = test::read_file(dir / "term" / "logs" / "rank-0.log");
  const size_t saved = log0.find("interrupted by SIGTERM on rank ");
  CHECK_MESSAGE(saved != std::string::npos, log0);
  CHECK_MESSAGE(log0.find("checkpoint saved to", saved) != std::string::npos, log0);
  for (const char* rank : {"rank-1.log", "rank-2.log", "rank-3.log"}) {
    const std::string log = test::read_file(dir / "term" / "logs" / rank);
    CHECK_MESSAGE(log.find("stopped by SIGTERM on rank ") != std::string::npos, log);
    CHECK_MESSAGE(log.find("with every rank; rank 0 saved the checkpoint") != std::string::npos, log);
  }
  REQUIRE(fs::exists(dir / "term" / "checkpoint.safetensors"));
  // It resumes: one more step, in one process.
  const size_t at = log0.find("after step ", saved);
  REQUIRE(at != std::string::npos);
  const long step = std::stol(log0.substr(at + 11));
  const Run resumed =
      ringtape(tiny_cpu_run(dir / "resumed", {"--resume", (dir / "term" / "checkpoint.safetensors").string(), "--epochs",
                                      "1000", "--steps", std::to_string(step + 1)}),
               dir / "resumed.txt");
  INFO(resumed.output);
  CHECK(resumed.status == 0);
  CHECK(resumed.output.find("resuming a run of 4 process(es) with 1") != std::string::npos);
}

}  // namespace
}  // namespace rt
