// A launcher for multi-process tests: N real processes on 127.0.0.1 with torchrun's
// environment (MASTER_ADDR, MASTER_PORT on a free port, RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE), their exit codes and output collected, and a hard wall-clock limit:
// at the limit every rank still running is SIGKILLed (its whole process group) and reported
// as hung. Nothing outlives a launch: each rank leads its own process group, which is killed
// when the rank ends, and a rank whose launcher dies gets SIGKILL (PR_SET_PDEATHSIG).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace rt::dist::testing {

struct RankResult {
  int rank = 0;
  int exit_code = -1;  // the exit status, when the rank exited
  int signal = 0;      // the signal that ended it, when one did (SIGKILL for a hung rank)
  bool hung = false;   // still running at the limit, so the launcher killed it
  std::string output;  // stdout and stderr together (the last kMaxOutput bytes)
};

struct LaunchResult {
  std::vector<RankResult> ranks;  // by rank
  double seconds = 0;             // wall-clock time of the whole launch
  int port = 0;                   // the MASTER_PORT the ranks got

  bool ok() const;               // every rank exited with 0
  std::vector<int> hung() const;  // ranks killed at the limit
  // One line per rank, then each failing rank's output: what a failed CHECK should print.
  std::string report() const;
};

struct LaunchOptions {
  std::chrono::milliseconds limit = std::chrono::seconds(10);
  int port = 0;                               // MASTER_PORT; 0 = a free port on 127.0.0.1
  std::map<std::string, std::string> env;     // more variables for every rank (override ours)
};

inline constexpr size_t kMaxOutput = 1 << 20;

// A TCP port on 127.0.0.1 that nothing listens on right now (bind to port 0, close).
int free_port();

// Forks `world` processes running body(rank); a rank's exit code is body's return value, 1
// with the message on stderr when it throws. Fork without exec: the parent must not hold
// threads whose locks the body needs (start servers inside the body, not before launch).
LaunchResult launch(int world, const std::function<int(int rank)>& body, const LaunchOptions& opts = {});

// Starts `world` processes of argv[0] (a path) with arguments argv[1..].
LaunchResult launch_exec(int world, const std::vector<std::string>& argv, const LaunchOptions& opts = {});

}  // namespace rt::dist::testing
