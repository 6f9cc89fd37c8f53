// Data-parallel training through the `ringtape` binary, as a user runs it: `ringtape train
// --nproc-per-node 2` on the CPU (Gloo), real processes on 127.0.0.1, each run bounded in time.
//   - the same run with tiny and huge gradient buckets, and with --allreduce ring, tree and
//     library, ends with bit-identical weights (two ranks: each element's average is
//     (a + b) / 2 whatever the order or the bucket it travels in);
//   - the distributed evaluation (each rank's shard, the sampler's padding left out) equals a
//     single-process `ringtape eval` of the saved checkpoint;
//   - a worker killed with SIGKILL stops the run: the launcher exits non-zero naming the rank,
//     no worker is left, the last checkpoint is intact;
//   - --master-port held by another socket: the error names the port;
//   - a 2-process checkpoint resumes in one process and says what changed;
//   - --sync-bn: 2 and 3 processes x batch B train like one process x batch 2B and 3B.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "distributed/net_util.h"
#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "tests/train/process_util.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using test::ringtape;
using test::tiny_cpu_run;
using test::Run;
using test::start;
using test::finish;
using test::weights;
using test::worst_relative;
fs::path tmpdir(const std::string& name) { return test::fresh_dir("data_parallel_test_", name); }
std::string read(const fs::path& p) { return test::read_file(p); }



TEST_CASE("2 processes: tiny and huge buckets, ring, tree and library all-reduce give the same weights") {
  const fs::path base = tmpdir("same");
  std::vector<float> ref;
  const std::vector<std::vector<std::string>> variants = {
      {"--bucket-cap-mb", "1000"}, {"--bucket-cap-mb", "0.0001"}, {"--allreduce", "ring"}, {"--allreduce", "tree"}};
  for (size_t k = 0; k < variants.size(); ++k) {
    const fs::path dir = base / std::to_string(k);
    std::vector<std::string> args = tiny_cpu_run(dir, {"--nproc-per-node", "2"});
    args.insert(args.end(), variants[k].begin(), variants[k].end());
    const Run r = ringtape(args, base / (std::to_string(k) + ".txt"));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("data parallel: rank 0 of 2 (gloo") != std::string::npos);
    CHECK(r.output.find("global batch 16 = 2 process(es) x batch 8") != std::string::npos);
    if (variants[k][0] == "--bucket-cap-mb")  // as given: 0.0001 was once printed as "0 MiB"
      CHECK(r.output.find("buckets of " + variants[k][1] + " MiB") != std::string::npos);
    CHECK(fs::exists(dir / "logs" / "rank-1.log"));
    const std::vector<float> w = weights(dir / "model.safetensors");
    if (k == 0) ref = w;
    else CHECK_MESSAGE(w == ref, "variant ", k, " trained other weights");
  }
}

TEST_CASE("the distributed evaluation equals a single-process evaluation of the checkpoint") {
  const fs::path dir = tmpdir("eval");
  const Run r = ringtape(tiny_cpu_run(dir / "run", {"--nproc-per-node", "2"}), dir / "train.txt");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const size_t at = r.output.find("epoch 0 eval:");
  REQUIRE(at != std::string::npos);
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  CHECK(line.find("(101 images)") != std::string::npos);  // the padding is not counted
  const Run e = ringtape({"eval", "--dataset", "synthetic", "--synthetic-size", "101x3x8x8", "--num-classes", "4",
                          "--width", "4", "--batch-size", "8", "--workers", "0", "--device", "cpu", "--seed", "3",
                          "--checkpoint", (dir / "run" / "checkpoint.safetensors").string()},
                         dir / "eval.txt");
  INFO(e.output);
  REQUIRE(e.status == 0);
  // "top-1 X%  top-5 Y%" must agree exactly.
  auto acc = [](const std::string& s) { return s.substr(s.find("top-1"), s.find("(") - s.find("top-1")); };
  CHECK(acc(line) == acc(e.output.substr(e.output.find("top-1") - 1)));
}

TEST_CASE("a worker killed with SIGKILL stops the run; nothing is left behind; the checkpoint stays") {
  const fs::path dir = tmpdir("kill");
  std::vector<pid_t> workers;
  const Run r = ringtape(tiny_cpu_run(dir / "run", {"--nproc-per-node", "2", "--epochs", "1000", "--checkpoint-every", "2",
                                            "--timeout", "20"}),
                         dir / "out.txt", 60s, [&](pid_t launcher) {
                           // Wait for a checkpoint, then kill rank 1 (the launcher's second child).
                           for (int i = 0; i < 600 && !fs::exists(dir / "run" / "checkpoint.safetensors"); ++i)
                             std::this_thread::sleep_for(50ms);
                           std::ifstream kids("/proc/" + std::to_string(launcher) + "/task/" +
                                              std::to_string(launcher) + "/children");
                           pid_t p;
                           while (kids >> p) workers.push_back(p);
                           if (workers.size() == 2) kill(workers[1], SIGKILL);
                         });
  INFO(r.output);
  REQUIRE(workers.size() == 2);
  CHECK(r.status != 0);
  CHECK(r.output.find("rank 1 failed (signal Killed)") != std::string::npos);
  CHECK(r.seconds < 40);
  for (pid_t p : workers) CHECK_MESSAGE(kill(p, 0) != 0, "worker ", p, " still exists");
  CHECK_NOTHROW(load_safetensors((dir / "run" / "checkpoint.safetensors").string()));
}

TEST_CASE("--master-port held by another socket: the error names the port") {
  const fs::path dir = tmpdir("port");
  const dist::net::Fd held = dist::net::listen_tcp("127.0.0.1", 0);
  const int port = dist::net::local_port(held.get());
  const Run r = ringtape(tiny_cpu_run(dir / "run", {"--nproc-per-node", "2", "--master-port", std::to_string(port),
                                            "--timeout", "10"}),
                         dir / "out.txt");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find(std::to_string(port)) != std::string::npos);
  CHECK(r.output.find("in use") != std::string::npos);
}

// Before: refused only once the workers ran (exit 1), and silently accepted in one process.
TEST_CASE("--grad-reduce-dtype bf16 on the CPU is refused with the fix before any worker starts") {
  const fs::path dir = tmpdir("bf16");
  for (const char* procs : {"2", "1"}) {
    CAPTURE(procs);
    const Run r = ringtape(tiny_cpu_run(dir / procs, {"--nproc-per-node", procs, "--grad-reduce-dtype", "bf16", "--timeout",
                                              "10"}),
                           dir / (std::string(procs) + ".txt"));
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find("--grad-reduce-dtype bf16 needs GPUs (NCCL)") != std::string::npos);
    CHECK(r.output.find("ringtape launcher:") == std::string::npos);
  }
}

TEST_CASE("ranks started with different training flags stop, naming the flag (torchrun-style environment)") {
  const fs::path dir = tmpdir("flags");
  const int port = dist::net::local_port(dist::net::listen_tcp("127.0.0.1", 0).get());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    const auto env = test::torchrun_env(port, r, 2);
    pids.push_back(start(tiny_cpu_run(dir / "run", {"--lr", r == 0 ? "0.1" : "0.2", "--timeout", "10"}),
                         dir / ("rank" + std::to_string(r) + ".txt"), env));
  }
  const Run r0 = finish(pids[0], dir / "rank0.txt", t0), r1 = finish(pids[1], dir / "rank1.txt", t0);
  INFO(r0.output);
  INFO(r1.output);
  CHECK(r1.status == 2);
  CHECK(r1.output.find("rank 1 runs with --lr 0.2 but rank 0 with --lr 0.1") != std::string::npos);
  CHECK(r0.status != 0);  // rank 0 loses its peer at the next collective
}

TEST_CASE("a checkpoint of 2 processes resumes in one, saying what changed") {
  const fs::path dir = tmpdir("resume");
  const Run r = ringtape(tiny_cpu_run(dir / "run", {"--nproc-per-node", "2", "--epochs", "2", "--steps", "3"}),
                         dir / "two.txt");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const Run one = ringtape({"train", "--dataset", "synthetic", "--synthetic-size", "101x3x8x8", "--num-classes", "4",
                            "--width", "4", "--batch-size", "8", "--epochs", "2", "--workers", "0", "--device", "cpu",
                            "--seed", "3", "--print-freq", "1", "--resume",
                            (dir / "run" / "checkpoint.safetensors").string()},
                           dir / "one.txt");
  INFO(one.output);
  CHECK(one.status == 0);
  CHECK(one.output.find("resuming a run of 2 process(es) with 1") != std::string::npos);
}

TEST_CASE("--comm-timeline: rank 0 writes one parseable line per step, buckets in launch order") {
  const fs::path dir = tmpdir("timeline");
  // Profiled too (steps 2-3): every rank writes its own profile and trace.
  const Run r = ringtape(tiny_cpu_run(dir / "run", {"--nproc-per-node", "2", "--steps", "3", "--bucket-cap-mb", "0.0001",
                                            "--comm-timeline", "--profile-steps", "2:4"}),
                         dir / "out.txt");
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::ifstream in(dir / "run" / "timeline.jsonl");
  REQUIRE(in.good());
  int steps = 0;
  for (std::string line; std::getline(in, line);) {
    INFO(line);
    const json::Value v = json::parse(line);
    ++steps;
    CHECK(v.find("step")->as_int() == steps);
    CHECK(v.find("world_size")->as_int() == 2);
    CHECK(v.find("clock")->as_string() == "host");
    CHECK(v.find("before_backward_s")->is_null() == (steps == 1));
    const double backward_end = v.find("backward_end_s")->as_double(), wait_end = v.find("wait_end_s")->as_double();
    const json::Array& buckets = v.find("buckets")->as_array();
    REQUIRE(buckets.size() > 2);  // a 100-byte cap: about one parameter per bucket
    double last_launch = 0;
    for (const json::Value& b : buckets) {
      CHECK(b.find("bytes")->as_int() > 0);
      const double ready = b.find("ready")->as_double(), launched = b.find("launched")->as_double();
      CHECK(0 <= ready);
      CHECK(ready <= launched);
      CHECK(last_launch <= launched);  // Note [Bucket launch order]
      CHECK(launched <= b.find("completed")->as_double());
      CHECK(b.find("completed")->as_double() <= wait_end);
      last_launch = launched;
    }
    // The first bucket (the classifier's bias) goes out while backward still runs.
    CHECK(buckets[0].find("launched")->as_double() < backward_end);
  }
  CHECK(steps == 3);
  // The profile: one table (rank 0's), files per rank; each rank's trace has the Gloo
  // communication thread's track with its bucket all-reduces.
  CHECK(r.output.find("profile of steps 2-3 on cpu") != std::string::npos);
  for (int rank : {0, 1}) {
    const fs::path trace = dir / "run" / ("trace.rank-" + std::to_string(rank) + ".json");
    CHECK(fs::exists(dir / "run" / ("profile.rank-" + std::to_string(rank) + ".json")));
    REQUIRE(fs::exists(trace));
    const json::Value t = json::parse(read(trace));
    int64_t comm_tid = -1;
    for (const json::Value& e : t.find("traceEvents")->as_array())
      if (e.find("ph")->as_string() == "M" && e.find("args")->find("name")->as_string() == "communication")
        comm_tid = e.find("tid")->as_int();
    REQUIRE(comm_tid >= 0);
    int reduces = 0;
    for (const json::Value& e : t.find("traceEvents")->as_array())
      if (e.find("ph")->as_string() == "X" && e.find("tid")->as_int() == comm_tid) ++reduces;
    CHECK(reduces > 2);  // about one bucket per parameter, two steps
  }
}



// --sync-bn: N ranks x batch 8 train like one process x batch 8N. Without shuffling, rank r's
// j-th batch holds positions r + N (8j + i), i < 8, of the epoch (data/loading/sampler.h): together
// [8Nj, 8N(j+1)), the one process's j-th batch. Bound, per tensor of model.safetensors
// (weights and running statistics): max |difference| <= 1e-4 max |value|. The two sides
// round differently in fp32 (each rank's weight gradients summed over its batch, then
// averaged, against one sum; the loss's 1/B against 1/(NB)) and 3 steps at lr 0.1 amplify
// it: measured 3.3e-6 (N = 2) and 4.3e-6 (N = 3), where the same one-process run in NCHW
// instead of NHWC (only fp32's order of rounding changes) moves the weights by 1.6e-5.
// Without --sync-bn they differ by 3 to 5 (each rank normalises its own 8 images).
TEST_CASE("--sync-bn: 2 and 3 processes x batch 8 train like one process x batch 16 and 24") {
  const fs::path base = tmpdir("sync_bn");
  auto train = [&](const std::string& name, int procs, std::vector<std::string> more) {
    std::vector<std::string> args = tiny_cpu_run(base / name, {"--no-shuffle", "--steps", "3"});
    args[std::find(args.begin(), args.end(), "--batch-size") - args.begin() + 1] = std::to_string(8 * procs);
    args.insert(args.end(), more.begin(), more.end());
    const Run r = ringtape(args, base / (name + ".txt"));
    INFO(r.output);
    REQUIRE(r.status == 0);
    return base / name / "model.safetensors";
  };
  for (int n : {2, 3}) {
    const std::string N = std::to_string(n);
    const fs::path one = train("one" + N, n, {});
    std::string which;
    const double d = worst_relative(train("sync" + N, 1, {"--nproc-per-node", N, "--sync-bn"}), one, which);
    MESSAGE(n, " processes with --sync-bn vs one: ", d, " (", which, ")");
    CHECK_MESSAGE(d <= 1e-4, n, " processes: ", which, " differs by ", d, " of its largest value");
    if (n == 2) {  // the check can tell: without --sync-bn the batch norms see 8 images
      const double apart = worst_relative(train("local" + N, 1, {"--nproc-per-node", N}), one, which);
      CHECK_MESSAGE(apart > 1e-2, "without --sync-bn: ", apart);
    }
  }
  // One process: --sync-bn is a no-op.
  const fs::path a = train("one_sync", 2, {"--sync-bn"});
  CHECK(weights(a) == weights(base / "one2" / "model.safetensors"));
}

}  // namespace
}  // namespace rt
