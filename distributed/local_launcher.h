// The local launcher behind `ringtape train --nproc-per-node N`: torchrun's job for one
// node. It starts N worker processes of a command with torchrun's environment contract
// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; every other
// variable, NCCL_* included, passes through untouched) and then supervises them:
//   - the global rank 0 writes to this console; the other workers' output is kept (the last
//     kTailBytes each) to show when one fails (each worker writes its own log file too);
//   - SIGINT / SIGTERM to the launcher are forwarded to every worker, which stop as they
//     would alone (train/interrupt.h), and the launcher exits 128 + the signal;
//   - when a worker fails (non-zero exit or a signal), the others get SIGTERM, then SIGKILL
//     after `grace`, and the launcher exits non-zero naming the first failed rank and its
//     last lines;
//   - nothing outlives the launcher: every worker leads its own process group, which is
//     killed when the worker ends, and dies with the launcher (PR_SET_PDEATHSIG);
//   - with max_restarts, a failed job is started again from its last checkpoint
//     (Note [Elastic restarts] in local_launcher.cc);
//   - the workers' flight records live in files it maps (RINGTAPE_FLIGHT_DIR, a temporary
//     directory it removes at the end): when a worker fails it reads them all, writes them to
//     the run's logs/ and prints where the ranks' collectives diverge
//     (Note [The launcher's analysis] in local_launcher.cc); SIGUSR1 to it reaches every worker
//     (each writes its records, nothing stops).
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace rt::dist {

struct LocalLaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port on this machine (single node only)
  std::chrono::seconds grace{30};  // SIGTERM to SIGKILL for the survivors of a failure
  std::vector<std::string> command;  // the worker: argv[0] (a path) and its arguments
  // Note [Elastic restarts] in local_launcher.cc: a failed job starts again at most this often,
  // and nodes wait this long for each other's launchers in a round.
  int max_restarts = 0;
  std::chrono::seconds rdzv_timeout{600};
  // The workers' command of a restarted round: the run in `run_dir` ("" = not known) resumed
  // from `checkpoint` ("" = none saved: from the start). Null: `command` again.
  std::function<std::vector<std::string>(const std::string& run_dir, const std::string& checkpoint)> restart_command;
  std::FILE* console = stderr;       // where the launcher's own lines go
};

inline constexpr size_t kTailBytes = 64 << 10;

// Runs the workers to the end; returns the exit status for the launcher (0 when every
// worker exited 0). Throws rt::Error only for what stops it before any worker started
// (bad options, a worker that cannot be started is a failed worker).
int run_local_launcher(const LocalLaunchOptions& opts);

// The last `lines` lines of `text` (for a failed worker's report).
std::string last_lines(const std::string& text, int lines);


}  // namespace rt::dist
