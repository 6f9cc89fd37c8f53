// All-reduce bandwidth and latency of the communicator's three algorithms side by side
// (library, ring, tree), with nccl-tests' definitions:
//   algbw = bytes / time;   busbw = algbw * 2(N-1)/N   (what each link carries for a ring;
//   comparable across world sizes and with the hardware's bandwidth).
// Sizes 4 KiB .. 256 MiB (x4), f32 sum, in place. Each (size, algorithm) cell: warm-up, then
// `rounds` timed rounds of back-to-back calls (each waited for); the cell reports the best
// round's mean time per call (the least disturbed by other processes on a shared machine).
//
//   allreduce_bench --nproc 4                    # Gloo, 4 local processes (forked here)
//   allreduce_bench --backend nccl --nproc 8     # NCCL, one forked process per GPU
//   torchrun --nproc-per-node 8 allreduce_bench --backend nccl   # the same under torchrun
// Without --nproc, the process is one rank of a job described by torchrun's (or Slurm's)
// environment (distributed/launch_env.h). Rank 0 prints the table (and --json lines).
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netinet/in.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/usage_error.h"
#include "bench/bench_util.h"
#include "cli/flags.h"
#include "distributed/communicator.h"
#include "distributed/gloo_communicator.h"
#include "distributed/launch_env.h"
#include "distributed/nccl_communicator.h"
#include "distributed/rendezvous.h"
#include "engine/device.h"
#include "engine/tensor.h"

namespace rt::bench {
namespace {

using dist::AllReduceAlgo;

// From the command line; the defaults are flag_table()'s.
struct Args {
  std::string backend;  // gloo (CPU tensors) or nccl (CUDA tensors)
  int nproc = 0;        // > 0: fork this many local ranks
  int64_t min_bytes = 0, max_bytes = 0;
  int rounds = 0;
  double round_s = 0;      // target time per round (at least 2 calls)
  size_t slice_bytes = 0;  // 0: CommOptions' default
  std::vector<AllReduceAlgo> algos;
  bool json = false;
};

const char* kUsage =
    "usage: allreduce_bench [--backend gloo|nccl] [--nproc N] [--min-bytes B] [--max-bytes B] [--rounds R] "
    "[--round-seconds S] [--slice-bytes B] [--algos library,ring,tree] [--json]";

// Byte counts: at least one f32 value, at most 1 TiB (the sizes grow by factors of 4 up to
// --max-bytes, which must not overflow).
constexpr int64_t kMaxBytes = int64_t(1) << 40;
cli::Range byte_range() {
  return cli::Range{4, double(kMaxBytes), false, "a byte count in [4, " + std::to_string(kMaxBytes) + "]"};
}

std::vector<cli::Flag> flag_table() {
  using cli::FlagType;
  using cli::Topic;
  return {
      {"backend", FlagType::string, "gloo", "the communicator; gloo: CPU tensors, nccl: CUDA tensors",
       {"gloo", "nccl"}},
      {"nproc", FlagType::integer, "",
       "start N local ranks on 127.0.0.1 (NCCL: rank i on GPU i); without it, run as one rank of a torchrun/srun "
       "job (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...)",
       {}, Topic::output, int_at_least(1)},
      {"min-bytes", FlagType::integer, "4096",
       "the smallest size, a multiple of 4 (f32 values); sizes run from it to --max-bytes by factors of 4", {},
       Topic::output, byte_range()},
      {"max-bytes", FlagType::integer, "268435456", "the largest size", {}, Topic::output, byte_range()},
      {"rounds", FlagType::integer, "3", "timed rounds per cell; the best round's mean time per call is reported", {},
       Topic::output, int_at_least(1)},
      {"round-seconds", FlagType::number, "0.2", "target time per round (at least 2 calls)", {}, Topic::output,
       cli::Range{0, std::numeric_limits<double>::infinity(), true, "positive"}},
      {"slice-bytes", FlagType::integer, "", "the pipeline's slice (else CommOptions' default)", {}, Topic::output,
       byte_range()},
      {"algos", FlagType::string, "library,ring,tree", "the algorithms to time, comma-separated: library, ring, tree"},
      {"json", FlagType::boolean, "false", "also print one JSON line per cell"},
  };
}

Args parse(int argc, char** argv) {
  const cli::Flags f = parse_flags(argc, argv, flag_table(), kUsage);
  Args a;
  a.backend = f.str("backend");
  a.nproc = f.given("nproc") ? int(f.integer("nproc")) : 0;
  a.min_bytes = f.integer("min-bytes");
  a.max_bytes = f.integer("max-bytes");
  // What the rows cannot say: whole f32 values, and at least one size to run.
  if (a.min_bytes % 4 != 0)
    throw UsageError("--min-bytes must be a multiple of 4 (whole f32 values), got " + f.str("min-bytes"));
  if (a.min_bytes > a.max_bytes)
    throw UsageError("--min-bytes (" + f.str("min-bytes") + ") is above --max-bytes (" + f.str("max-bytes") +
                     "): no size to run");
  a.rounds = int(f.integer("rounds"));
  a.round_s = f.number("round-seconds");
  a.slice_bytes = f.given("slice-bytes") ? size_t(f.integer("slice-bytes")) : 0;
  a.json = f.boolean("json");
  const std::string list = f.str("algos");
  for (size_t b = 0; b <= list.size();) {
    const size_t e = std::min(list.find(',', b), list.size());
    const std::string name = list.substr(b, e - b);
    bool known = false;
    for (AllReduceAlgo algo : {AllReduceAlgo::library, AllReduceAlgo::ring, AllReduceAlgo::tree})
      if (name == dist::algo_name(algo)) a.algos.push_back(algo), known = true;
    if (!known)
      throw UsageError("--algos takes a comma-separated list of library, ring and tree, got '" + list + "'");
    b = e + 1;
  }
  return a;
}

struct Cell {
  int64_t bytes;
  AllReduceAlgo algo;
  double seconds;  // per call, best round
};

// Times `algo` on `x`: the best round's mean seconds per call. Every rank runs the same
// number of calls (rank 0's estimate is broadcast).
double time_cell(dist::Communicator& c, const Tensor& x, AllReduceAlgo algo, const Args& a) {
  for (int w = 0; w < 2; ++w) c.all_reduce(x, dist::ReduceOp::sum, algo).wait();  // warm-up
  auto t0 = Clock::now();
  c.all_reduce(x, dist::ReduceOp::sum, algo).wait();
  Tensor calls = Tensor::full({1}, std::clamp(a.round_s / std::max(1e-6, s_between(t0, Clock::now())), 2.0, 1000.0),
                              DType::f64, c.device());
  c.broadcast(calls, 0).wait();
  const int n = int(calls.item());
  double best = 1e30;
  for (int r = 0; r < a.rounds; ++r) {
    c.barrier().wait();
    t0 = Clock::now();
    for (int k = 0; k < n; ++k) c.all_reduce(x, dist::ReduceOp::sum, algo).wait();
    best = std::min(best, s_between(t0, Clock::now()) / n);
  }
  return best;
}

std::string size_name(int64_t b) {
  if (b >= (1 << 20)) return std::to_string(b >> 20) + " MiB";
  if (b >= (1 << 10)) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

int run_rank(const Args& a) {
  const dist::LaunchEnv env = dist::launch_env_from_process();
  dist::CommOptions o;
  o.timeout = std::chrono::minutes(5);
  dist::RendezvousStore rs = dist::connect_store(env, o.timeout);
  dist::Store& store = *rs.store;
  if (a.slice_bytes) o.slice_bytes = a.slice_bytes;
  std::unique_ptr<dist::Communicator> comm;
  if (a.backend == "nccl") {
    const int gpus = cuda_device_count();
    if (env.local_rank >= gpus)
      throw std::runtime_error("rank " + std::to_string(env.rank) + " (local rank " + std::to_string(env.local_rank) +
                               ") has no GPU of its own: this machine has " + std::to_string(gpus) +
                               " (NCCL needs one GPU per rank)");
    comm = std::make_unique<dist::NcclCommunicator>(store, env.rank, env.world_size, env.local_rank, o);
  }
  else comm = std::make_unique<dist::GlooCommunicator>(store, env.rank, env.world_size, o);
  dist::Communicator& c = *comm;
  const int N = c.world_size();

  std::vector<Cell> cells;
  const auto start = sample_cpu();
  for (int64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 4) {
    Tensor x = Tensor::full({bytes / 4}, 1.0, DType::f32, c.device());
    for (AllReduceAlgo algo : a.algos) cells.push_back({bytes, algo, time_cell(c, x, algo, a)});
  }
  const auto end = sample_cpu();
  c.barrier().wait();  // rank 0's store serves until everyone is done
  if (env.rank != 0) return 0;

  std::printf("all_reduce f32 sum, %s, %d ranks (%s), best of %d rounds\n", c.backend(), N, env.describe().c_str(),
              a.rounds);
  std::printf("| size |");
  for (AllReduceAlgo algo : a.algos) std::printf(" %s time | %s algbw | %s busbw |", dist::algo_name(algo),
                                                 dist::algo_name(algo), dist::algo_name(algo));
  std::printf("\n| --- |");
  for (size_t k = 0; k < a.algos.size(); ++k) std::printf(" --- | --- | --- |");
  std::printf("\n");
  const double bus = 2.0 * (N - 1) / N;  // nccl-tests: 0 for one rank
  for (size_t i = 0; i < cells.size(); i += a.algos.size()) {
    std::printf("| %s |", size_name(cells[i].bytes).c_str());
    for (size_t k = 0; k < a.algos.size(); ++k) {
      const Cell& cl = cells[i + k];
      const double algbw = double(cl.bytes) / cl.seconds / 1e9;
      std::printf(" %.1f us | %.3f GB/s | %.3f GB/s |", cl.seconds * 1e6, algbw, algbw * bus);
    }
    std::printf("\n");
  }
  const double others = others_cpu_share(start, end);
  if (others > kBusyShare) std::printf("note: other processes used %.0f%% of the CPUs during the run\n", 100 * others);
  if (a.json)
    for (const Cell& cl : cells)
      std::printf("{\"backend\": %s, \"world\": %d, \"algo\": %s, \"bytes\": %lld, \"seconds\": %s, "
                  "\"algbw_GBps\": %s, \"busbw_GBps\": %s}\n",
                  json_str(c.backend()).c_str(), N, json_str(dist::algo_name(cl.algo)).c_str(),
                  static_cast<long long>(cl.bytes), num(cl.seconds).c_str(), num(double(cl.bytes) / cl.seconds / 1e9).c_str(),
                  num(double(cl.bytes) / cl.seconds / 1e9 * bus).c_str());
  return 0;
}

// A TCP port on 127.0.0.1 that nothing listens on now.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("cannot find a free port on 127.0.0.1");
  ::close(fd);
  return ntohs(a.sin_port);
}

// Forks a.nproc ranks with torchrun's environment; the exit status is the worst rank's.
int spawn(const Args& a) {
  const std::string port = std::to_string(free_port()), world = std::to_string(a.nproc);
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int r = 0; r < a.nproc; ++r) {
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      const std::string rank = std::to_string(r);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv("RANK", rank.c_str(), 1);
      setenv("LOCAL_RANK", rank.c_str(), 1);
      setenv("WORLD_SIZE", world.c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", world.c_str(), 1);
      int code = 1;
      try {
        code = run_rank(a);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "allreduce_bench rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(code);
    }
    pids.push_back(pid);
  }
  int worst = 0;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) worst = 1;
  }
  return worst;
}

}  // namespace
}  // namespace rt::bench

int main(int argc, char** argv) {
  using namespace rt::bench;
  try {
    const Args a = parse(argc, argv);
    return a.nproc > 0 ? spawn(a) : run_rank(a);
  } catch (const rt::UsageError& e) {
    return usage_failure("allreduce_bench", e, flag_table(), kUsage);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
}
