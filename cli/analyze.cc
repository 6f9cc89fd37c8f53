#include "cli/analyze.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"
#include "base/usage_error.h"
#include "distributed/flight_analysis.h"
#include "distributed/stack_dump.h"

namespace rt::cli {

int analyze_command(const std::vector<std::string>& args) {
  const char* usage = "usage: ringtape analyze RUN_DIR  (a data-parallel run's directory, holding logs/)";
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::printf(
          "%s\nMerges the ranks' flight records (logs/flight-rank-K.json) and prints, per communicator, the "
          "first collective where the ranks diverge.\n",
          usage);
      return 0;
    }
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-')
    throw UsageError(std::string("ringtape analyze takes one run directory; ") + usage);
  std::vector<std::string> problems;
  std::vector<dist::flight::RankRecords> ranks;
  try {
    ranks = dist::flight::read_run_dir(args[0], problems);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  dist::flight::keep_one_run(ranks, problems);
  for (const std::string& p : problems) std::fprintf(stderr, "ringtape analyze: skipped %s\n", p.c_str());
  if (ranks.empty()) {
    std::printf(
        "%s/logs holds no flight record (logs/flight-rank-K.json): a rank writes one when a collective "
        "fails, on SIGUSR1 and at a fatal signal, the launcher when a rank fails; --trace-buffer 0 writes "
        "none\n",
        args[0].c_str());
    return 1;
  }
  int world = 0;
  for (const auto& r : ranks) {
    world = std::max(world, r.world);
    const std::string who = r.fate.empty() ? "pid " + std::to_string(r.pid) : r.fate;
    std::printf("rank %d (%s): %zu collectives recorded, written: %s\n", r.rank, who.c_str(), r.records.size(),
                r.reason.c_str());
  }
  std::printf("%s", dist::flight::analyze(ranks, world).c_str());
  return 0;
}

int stacks_command(const std::vector<std::string>& args) {
  const char* usage = "usage: ringtape stacks PID  (a running process this user may trace)";
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::printf("%s\nPrints where the main thread is, then every thread's stack (function, file:line).\n", usage);
      return 0;
    }
  char* end = nullptr;
  const long pid = args.size() == 1 ? std::strtol(args[0].c_str(), &end, 10) : 0;
  if (args.size() != 1 || !end || *end != '\0' || pid <= 0)
    throw UsageError(std::string("ringtape stacks takes one process id; ") + usage);
  const dist::ProcessStacks s = dist::read_stacks(pid_t(pid));
  if (!s.error.empty()) {
    std::fprintf(stderr, "ringtape stacks: process %ld: %s\n", pid, s.error.c_str());
    return 1;
  }
  std::printf("%s", dist::stacks_report(s).c_str());
  return 0;
}

}  // namespace rt::cli
