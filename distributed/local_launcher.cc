#include "distributed/local_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "distributed/flight_analysis.h"
#include "distributed/launcher_rounds.h"
#include "distributed/stack_dump.h"
#include "distributed/net_util.h"
#include "base/error.h"

namespace rt::dist {
namespace {

using Clock = std::chrono::steady_clock;

// The signal the launcher received (0: none), set by its handler, read by the loop.
std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal.store(sig); }
// SIGUSR1 to the launcher: passed on to every worker, whose flight recorder writes its records
// (Note [Flight recorder] in distributed/flight_recorder.h); nothing stops.
std::atomic<bool> g_usr1{false};
void on_usr1(int) { g_usr1.store(true); }

struct Worker {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  int out = -1;  // read end of its output pipe; -1 for the worker writing to the console
  bool running = false;
  bool stacks_read = false;  // the launcher traced it (Note [Threads a reader leaves traced] in stack_dump.cc)
  int status = 0;  // waitpid status once ended
  std::string tail;
};

// kReapedElsewhere: the worker ended but its status was taken by another waiter (a ptrace
// reader of its stacks that met its exit).
constexpr int kReapedElsewhere = -1;

std::string exit_text(int status) {
  if (status == kReapedElsewhere) return "an exit status the launcher could not read";
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// In the child, before exec: its own group, death with the launcher, the environment,
// output to the pipe (or the console).
[[noreturn]] void exec_worker(const std::vector<std::string>& command, const std::map<std::string, std::string>& env,
                              pid_t launcher, int out_fd) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(111);  // the launcher died before prctl took effect
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (out_fd >= 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    close(out_fd);
  }
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  std::fprintf(stderr, "cannot start worker %s: %s\n", command[0].c_str(), std::strerror(errno));
  _exit(127);
}

// What the launcher sees of a worker's process: how it ended, or whether it is stopped.
std::string fate_of(const Worker& w) {
  if (!w.running) return exit_text(w.status);
  std::ifstream stat("/proc/" + std::to_string(w.pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');  // the state follows the command name in parentheses
  const char state = paren != std::string::npos && paren + 2 < text.size() ? text[paren + 2] : '?';
  if (state == 'T' || state == 't') return "stopped (SIGSTOP, or a debugger), still alive";
  return "running";
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Note [The launcher's analysis]
// When a worker fails, the launcher reads every local worker's flight ring (mapped files in
// its RINGTAPE_FLIGHT_DIR: Note [Flight recorder] in distributed/flight_recorder.h) before it
// stops the others, so a stopped or killed rank's records are there as it left them and the
// survivors' show where they waited. Then the stacks of every worker still alive
// (Note [Stacks of a stuck rank] in distributed/stack_dump.h): appended to the rank's
// logs/rank-K.log, and its main thread's place quoted in the analysis. It writes the records
// to <run dir>/logs/flight-rank-K.json (what `ringtape analyze` reads later), with what it saw
// of each process, adds the records other nodes' ranks wrote there (a run directory on a
// shared file system), and prints the analysis (Note [Where ranks diverge] in
// distributed/flight_analysis.h) before it exits.
void report_flight(const LocalLaunchOptions& o, std::vector<Worker>& workers, const Worker& failed,
                   const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  using flight::RankRecords;
  std::vector<RankRecords> ranks;
  std::string run_dir;
  const std::string why = "by the launcher when rank " + std::to_string(failed.rank) + " failed";
  for (const Worker& w : workers) {
    const fs::path ring = dir / flight::mapped_name(w.rank);
    if (fs::exists(dir / flight::run_dir_name(w.rank))) run_dir = read_text(dir / flight::run_dir_name(w.rank));
    if (!fs::exists(ring)) continue;
    try {
      RankRecords r = flight::read_mapped(ring.string());
      r.fate = fate_of(w);
      r.reason = why;
      r.written = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      ranks.push_back(std::move(r));
    } catch (const std::exception& e) {
      std::fprintf(o.console, "ringtape launcher: rank %d's flight records: %s\n", w.rank, e.what());
    }
  }
  if (ranks.empty()) return;  // --trace-buffer 0, or no rank got as far as its communicators
  for (RankRecords& r : ranks)
    for (Worker& w : workers)
      if (w.rank == r.rank && w.running) {
        w.stacks_read = true;
        const ProcessStacks stacks = read_stacks(w.pid);
        r.main_thread = main_thread_where(stacks);
        if (run_dir.empty()) continue;
        std::ofstream log(fs::path(run_dir) / "logs" / ("rank-" + std::to_string(w.rank) + ".log"), std::ios::app);
        log << "\n---- rank " << w.rank << "'s threads (pid " << w.pid << ", " << fate_of(w) << "), read " << why
            << " ----\n" << stacks_text(stacks) << "----\n";
      }
  std::string where = "the run directory is not known yet: not written";
  if (!run_dir.empty()) {
    std::vector<int> mine;
    for (const RankRecords& r : ranks) {
      mine.push_back(r.rank);
      const fs::path file = fs::path(run_dir) / "logs" / flight::dump_name(r.rank);
      std::error_code ec;
      fs::create_directories(file.parent_path(), ec);
      std::ofstream(file.string() + ".tmp", std::ios::trunc) << flight::to_json(r);
      fs::rename(file.string() + ".tmp", file, ec);
    }
    where = (fs::path(run_dir) / "logs" / "flight-rank-K.json").string() + "; ringtape analyze " + run_dir;
    // Other nodes' ranks: their launchers write their files when their ranks fail, which follows
    // this failure within moments (a lost peer is seen at once): wait for them a little.
    const int world = o.nproc_per_node * o.nnodes;
    const double now_unix =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(o.nnodes > 1 ? 5 : 0);
    std::vector<RankRecords> others;
    do {
      others.clear();
      std::vector<std::string> problems;
      try {
        for (RankRecords& r : flight::read_run_dir(run_dir, problems))
          if (std::find(mine.begin(), mine.end(), r.rank) == mine.end()) others.push_back(std::move(r));
      } catch (const std::exception&) {
      }
      // A file from before this failure (a SIGUSR1's) does not count as the rank's report yet.
      int fresh = 0;
      for (const RankRecords& r : others) fresh += r.written >= now_unix - 30 ? 1 : 0;
      if (int(mine.size()) + fresh >= world) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (std::chrono::steady_clock::now() < until);
    for (RankRecords& r : others) ranks.push_back(std::move(r));
    std::vector<std::string> stale;
    flight::keep_one_run(ranks, stale);  // an earlier run's files in a resumed directory
    for (const std::string& p : stale) std::fprintf(o.console, "ringtape launcher: left out %s\n", p.c_str());
  }
  std::string text = flight::analyze(ranks, o.nproc_per_node * o.nnodes);
  std::string indented;
  for (size_t at = 0; at < text.size();) {
    const size_t nl = text.find('\n', at);
    indented += "  " + text.substr(at, nl - at) + "\n";
    at = nl == std::string::npos ? text.size() : nl + 1;
  }
  std::fprintf(o.console, "ringtape launcher: where the ranks' collectives diverge (flight records: %s):\n%s",
               where.c_str(), indented.c_str());
  std::fflush(o.console);
}

void check_options(const LocalLaunchOptions& o) {
  RT_CHECK(o.nproc_per_node >= 1, "local launcher: nproc_per_node must be at least 1, got ", o.nproc_per_node);
  RT_CHECK(o.nnodes >= 1, "local launcher: nnodes must be at least 1, got ", o.nnodes);
  RT_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "local launcher: node_rank must be in [0, ", o.nnodes, "), got ",
           o.node_rank);
  RT_CHECK(o.master_port >= 0 && o.master_port <= 65535, "local launcher: master_port must be in [0, 65535], got ",
           o.master_port);
  RT_CHECK(o.master_port != 0 || o.nnodes == 1,
           "local launcher: master_port is needed with nnodes > 1 (every node must use the same one, e.g. 29500)");
  RT_CHECK(!o.command.empty(), "run_local_launcher: no worker command");
  RT_CHECK(o.max_restarts >= 0, "local launcher: max_restarts must be >= 0, got ", o.max_restarts);
  RT_CHECK(o.nnodes == 1 || o.max_restarts == 0 || o.master_port < 65535,
           "local launcher: with nnodes > 1 and restarts the launchers' store listens on master_port + 1; choose a "
           "master_port below 65535");
}

}  // namespace

std::string last_lines(const std::string& text, int lines) {
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n') --end;
  size_t pos = end;
  for (int k = 0; k < lines && pos > 0; ++k) {
    const size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      pos = 0;
      break;
    }
    pos = k + 1 < lines ? nl : nl + 1;
  }
  return text.substr(pos, end - pos);
}

namespace {

// One round's workers, from their start to the end of the last of them.
struct RoundEnd {
  enum class Kind { done, signalled, failed, moved_on } kind = Kind::done;
  int status = 0;       // the launcher's exit status, should the job end with this round
  std::string cause;    // failed: "rank 1 failed (signal Killed)"; moved_on: the other node's reason
  std::string run_dir;  // where the workers said the run is ("" = none got that far)
};

// This node's workers for round `round`, started: each in a process group of its own, with
// the torchrun environment; rank 0 writes to the console, the others into a pipe whose tail
// is kept for the failure report. The last round's flight-recorder rings are removed
// first (Note [Elastic restarts]).
std::vector<Worker> start_workers(const LocalLaunchOptions& o, const std::vector<std::string>& command, int port,
                                  int round, const std::string& cause, const std::string& flight_dir) {
  const int world = o.nproc_per_node * o.nnodes;
  std::vector<Worker> workers(size_t(o.nproc_per_node));
  for (int lr = 0; lr < o.nproc_per_node; ++lr) {
    const int rank = o.node_rank * o.nproc_per_node + lr;
    std::error_code ec;
    std::filesystem::remove(std::filesystem::path(flight_dir) / flight::mapped_name(rank), ec);
  }
  const pid_t self = getpid();
  for (int lr = 0; lr < o.nproc_per_node; ++lr) {
    Worker& w = workers[size_t(lr)];
    w.local_rank = lr;
    w.rank = o.node_rank * o.nproc_per_node + lr;
    std::map<std::string, std::string> env = {
        {"MASTER_ADDR", o.master_addr},          {"MASTER_PORT", std::to_string(port)},
        {"RANK", std::to_string(w.rank)},        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(lr)},      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
        {"GROUP_RANK", std::to_string(o.node_rank)},  {"RINGTAPE_FLIGHT_DIR", flight_dir}};
    if (round > 0) {
      env["RINGTAPE_RESTART_ROUND"] = std::to_string(round);
      env["RINGTAPE_RESTART_CAUSE"] = cause;
    }
    int fds[2] = {-1, -1};
    const bool console = w.rank == 0;
    if (!console) RT_CHECK(pipe2(fds, O_CLOEXEC) == 0, "launcher: pipe: ", std::strerror(errno));
    const pid_t pid = fork();
    RT_CHECK(pid >= 0, "launcher: fork: ", std::strerror(errno));
    if (pid == 0) {
      if (fds[0] >= 0) close(fds[0]);
      exec_worker(command, env, self, fds[1]);
    }
    setpgid(pid, pid);
    if (fds[1] >= 0) close(fds[1]);
    if (fds[0] >= 0) fcntl(fds[0], F_SETFL, O_NONBLOCK);
    w.pid = pid;
    w.out = fds[0];
    w.running = true;
  }
  return workers;
}

// Waits up to 50 ms for output (exits are not pollable), then appends what the pipes hold to
// each worker's tail, kept to its last kTailBytes.
void read_output(std::vector<Worker>& workers) {
  std::vector<pollfd> fds;
  for (Worker& w : workers)
    if (w.out >= 0) fds.push_back({w.out, POLLIN, 0});
  poll(fds.data(), fds.size(), 50);
  for (Worker& w : workers) {
    if (w.out < 0) continue;
    char buf[16384];
    ssize_t k;
    while ((k = read(w.out, buf, sizeof buf)) > 0) w.tail.append(buf, size_t(k));
    if (w.tail.size() > kTailBytes) w.tail.erase(0, w.tail.size() - kTailBytes);
  }
}

// How the round ended, once every worker has: stopped by a signal the launcher forwarded
// (`forwarded`), moved on to another node's next round, failed (`first_failed`, an index into
// workers: its exit and last lines are printed) or done. Also where the workers said the run is.
RoundEnd finish_round(const LocalLaunchOptions& o, std::vector<Worker>& workers, const std::string& flight_dir,
                      RoundEnd end, int forwarded, bool moved_on, int first_failed) {
  for (Worker& w : workers)
    if (w.out >= 0) close(w.out);
  for (const Worker& w : workers)
    if (const std::filesystem::path told = std::filesystem::path(flight_dir) / flight::run_dir_name(w.rank);
        end.run_dir.empty() && std::filesystem::exists(told))
      end.run_dir = read_text(told);

  if (forwarded) {
    end.kind = RoundEnd::Kind::signalled;
    end.status = 128 + forwarded;
    return end;
  }
  if (moved_on) {
    end.kind = RoundEnd::Kind::moved_on;
    end.status = 1;
    return end;
  }
  if (first_failed < 0) return end;
  end.kind = RoundEnd::Kind::failed;
  const Worker& f = workers[size_t(first_failed)];
  std::fprintf(o.console, "ringtape launcher: rank %d (local rank %d, pid %d) ended with %s", f.rank, f.local_rank,
               int(f.pid), exit_text(f.status).c_str());
  if (!f.tail.empty())
    std::fprintf(o.console, "; its last lines:\n%s\n", last_lines(f.tail, 20).c_str());
  else
    std::fprintf(o.console, "%s\n", f.rank == 0 ? " (its output is above)" : " (no output)");
  end.status = f.status == kReapedElsewhere ? 1
               : WIFEXITED(f.status)          ? WEXITSTATUS(f.status)
                                              : 128 + WTERMSIG(f.status);
  return end;
}

// One round: its workers started, watched until the last has ended; the first failure (or a
// forwarded signal, or another node's request for the next round) stops the others, SIGTERM
// then SIGKILL after the grace period.
RoundEnd run_round(const LocalLaunchOptions& o, const std::vector<std::string>& command, int port, int round,
                   const std::string& cause, const std::string& flight_dir, LauncherRounds* rounds) {
  std::vector<Worker> workers = start_workers(o, command, port, round, cause, flight_dir);
  RoundEnd end;
  int first_failed = -1;  // index into workers
  int forwarded = 0;      // the signal forwarded to the workers
  bool moved_on = false;  // another node's launcher asked for the next round
  Clock::time_point kill_at = Clock::time_point::max(), next_poll = Clock::now();
  // A stopped worker (SIGSTOP, a debugger) acts on SIGTERM only once continued: without the
  // SIGCONT it kept the launcher waiting the whole grace period before SIGKILL.
  auto signal_all = [&](int sig) {
    for (Worker& w : workers)
      if (w.running) {
        kill(-w.pid, sig);
        if (sig == SIGTERM || sig == SIGINT) kill(-w.pid, SIGCONT);
      }
  };
  for (;;) {
    read_output(workers);
    if (g_usr1.exchange(false))
      for (Worker& w : workers)
        if (w.running) kill(w.pid, SIGUSR1);  // the worker only: its group may hold helpers
    if (const int sig = g_signal.exchange(0); sig != 0) {
      if (!forwarded) std::fprintf(o.console, "ringtape launcher: %s: stopping the workers\n", strsignal(sig));
      forwarded = sig;
      signal_all(sig);
      kill_at = std::min(kill_at, Clock::now() + o.grace);
    }
    // Another node's launcher asked for the next round (Note [Elastic restarts]).
    if (rounds && !moved_on && first_failed < 0 && !forwarded && Clock::now() >= next_poll) {
      next_poll = Clock::now() + std::chrono::milliseconds(250);
      if (rounds->requested(round + 1, &end.cause)) {
        moved_on = true;
        std::fprintf(o.console, "ringtape launcher: round %d asked for (%s): stopping this node's workers\n",
                     round + 1, end.cause.c_str());
        signal_all(SIGTERM);
        kill_at = Clock::now() + o.grace;
      }
    }
    bool any = false;
    for (size_t i = 0; i < workers.size(); ++i) {
      Worker& w = workers[i];
      if (!w.running) continue;
      if (w.stacks_read) release_threads(w.pid);
      siginfo_t info{};
      const int rc = waitid(P_PID, w.pid, &info, WEXITED | WNOWAIT | WNOHANG);
      if (rc != 0 && errno == ECHILD) {  // reaped already: reading its stacks met its exit
        kill(-w.pid, SIGKILL);
        w.status = kReapedElsewhere;
        w.running = false;
      } else if (rc == 0 && info.si_pid != 0) {
        kill(-w.pid, SIGKILL);  // what it left behind; the group id cannot be reused yet (zombie)
        waitpid(w.pid, &w.status, 0);
        w.running = false;
        if (failed(w.status) && first_failed < 0 && !forwarded && !moved_on) {
          first_failed = int(i);
          end.cause = "rank " + std::to_string(w.rank) + " failed (" + exit_text(w.status) + ")";
          std::fprintf(o.console, "ringtape launcher: %s; stopping the other workers\n", end.cause.c_str());
          // A rank that stopped on SIGINT/SIGTERM (train/interrupt.h: every rank stops together,
          // Note [Stopping together] in train/trainer.cc) ended in order: nothing to analyse.
          const bool stopped_in_order = WIFEXITED(w.status) && (WEXITSTATUS(w.status) == 128 + SIGTERM ||
                                                                WEXITSTATUS(w.status) == 128 + SIGINT);
          if (!stopped_in_order) report_flight(o, workers, w, flight_dir);  // before the others move on
          if (rounds) {  // every node's launcher stops its workers now, not at their timeout
            try {
              rounds->request(round + 1, "node " + std::to_string(o.node_rank) + ": " + end.cause);
            } catch (const std::exception& e) {
              std::fprintf(o.console, "ringtape launcher: cannot tell the other nodes: %s\n", e.what());
            }
          }
          signal_all(SIGTERM);
          kill_at = Clock::now() + o.grace;
        }
      }
      any |= w.running;
    }
    if (!any) break;
    if (Clock::now() >= kill_at) {
      signal_all(SIGKILL);
      kill_at = Clock::time_point::max();
    }
  }
  return finish_round(o, workers, flight_dir, std::move(end), forwarded, moved_on, first_failed);
}

// Note [Elastic restarts]
// With --max-restarts N (torchrun's flag and meaning), a job whose rank fails is started again
// instead of ending, at most N times: the launcher analyses the failure as always
// (Note [The launcher's analysis]), stops the other workers (SIGTERM, SIGKILL after the grace
// period), waits until every one has ended, and starts all of them again in a new round:
// RINGTAPE_RESTART_ROUND=R and RINGTAPE_RESTART_CAUSE in their environment, the same command
// but for --output-dir, which is now the run's directory (the workers told it through the
// flight directory), and --resume, now its checkpoint.safetensors when one was saved (else the
// run starts over in the same directory). A run resumes exactly (Note [Exact resume] in
// train/resume.h), so it ends with the weights of a run stopped at that checkpoint and resumed
// by hand; --checkpoint-every bounds the steps redone. Rank 0 logs the restart ("restart R by
// the launcher (cause): from <checkpoint>, step S"; a metrics.jsonl record of type "restart")
// and moves the records of the redone steps out of metrics.jsonl
// (Note [Metrics of a resumed run] in train/metrics.h). A failed rank's partial work is not
// saved: a checkpoint is never written once the ranks' communication failed
// (Note [No checkpoint after a failure] in train/trainer.cc). Each round starts without the
// last round's flight rings: a rank that fails before it maps its own would otherwise be
// analysed from its predecessor's records.
// Several nodes: the launchers agree on rounds through a store node 0's launcher hosts
// (distributed/launcher_rounds.h). A launcher whose worker fails asks every node for the next
// round; the others, polling the store, stop their workers at once (not at their collective
// timeout) and join it; a round starts when every node's launcher joined it, and a node that
// does not join within --rdzv-timeout ends the job, named. A node's launcher that was killed
// and started again with the same command asks for a new round itself (its workers died with
// it). Node 0 publishes the checkpoint the round resumes from (one path for every rank: a shared
// file system, as resuming by hand needs). Node 0's launcher is the one that cannot be lost: its
// store goes with it, and the other nodes' runs then end at their workers' failure.
// Not restarted: a job stopped by a signal to the launcher (every rank stopped in order), and a
// job whose ranks all ended well.
std::vector<std::string> command_of_round(const LocalLaunchOptions& o, int round, const std::string& run_dir,
                                          const std::string& checkpoint) {
  if (round == 0 || !o.restart_command) return o.command;
  return o.restart_command(run_dir, checkpoint);
}

}  // namespace

int run_local_launcher(const LocalLaunchOptions& o) {
  check_options(o);
  const int world = o.nproc_per_node * o.nnodes;
  std::fprintf(o.console, "ringtape launcher: %d worker(s) on this node (ranks %d-%d of %d), master %s%s\n",
               o.nproc_per_node, o.node_rank * o.nproc_per_node, (o.node_rank + 1) * o.nproc_per_node - 1, world,
               o.master_port ? net::endpoint(o.master_addr, o.master_port).c_str() : "on a free port",
               o.max_restarts > 0 ? (", up to " + std::to_string(o.max_restarts) + " restart(s)").c_str() : "");
  std::fflush(nullptr);

  // Several nodes that may restart: the launchers' store (Note [Elastic restarts]).
  std::unique_ptr<LauncherRounds> rounds;
  int round = 0;
  std::string cause, run_dir, checkpoint;
  if (o.nnodes > 1 && o.max_restarts > 0) {
    rounds = std::make_unique<LauncherRounds>(o.master_addr, o.master_port + 1, o.node_rank, o.nnodes, o.rdzv_timeout);
    round = rounds->join(rounds->first_round(&cause), &cause);
    if (round > o.max_restarts) {
      std::fprintf(o.console, "ringtape launcher: the job is at round %d, past --max-restarts %d: not starting\n",
                   round, o.max_restarts);
      return 1;
    }
    if (round > 0) {
      checkpoint = rounds->checkpoint(round);
      if (!checkpoint.empty()) run_dir = std::filesystem::path(checkpoint).parent_path().string();
      std::fprintf(o.console, "ringtape launcher: this node joins the job in restart %d of at most %d (%s): %s\n",
                   round, o.max_restarts, cause.c_str(),
                   checkpoint.empty() ? "from the start (no checkpoint was saved)"
                                      : ("resuming from " + checkpoint).c_str());
    }
  }

  g_signal.store(0);
  struct sigaction sa{}, old_int{}, old_term{}, old_usr1{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_usr1.store(false);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, &old_usr1);

  // The workers' flight rings (Note [The launcher's analysis]), removed when they have ended.
  std::string flight_dir = (std::filesystem::temp_directory_path() / "ringtape-flight-XXXXXX").string();
  RT_CHECK(mkdtemp(flight_dir.data()) != nullptr, "launcher: cannot make a directory for the flight records (",
           flight_dir, "): ", std::strerror(errno), "; set TMPDIR to a writable directory");
  int status = 0;
  for (;;) {
    // A free port for a single node: bind port 0, read it, close (the workers' rank 0 binds it
    // next; torchrun does the same). A new one each round: the last round's may linger.
    const int port = o.master_port ? o.master_port : net::local_port(net::listen_tcp(o.master_addr, 0).get());
    const RoundEnd e = run_round(o, command_of_round(o, round, run_dir, checkpoint), port, round, cause, flight_dir,
                                 rounds.get());
    if (!e.run_dir.empty()) run_dir = e.run_dir;
    if (e.kind == RoundEnd::Kind::done) {
      if (rounds) rounds->done();
      break;
    }
    status = e.status;
    if (e.kind == RoundEnd::Kind::signalled) break;
    cause = e.kind == RoundEnd::Kind::failed && rounds ? "node " + std::to_string(o.node_rank) + ": " + e.cause
                                                        : e.cause;
    if (round + 1 > o.max_restarts) {
      if (o.max_restarts > 0)
        std::fprintf(o.console, "ringtape launcher: %s, and the job was restarted %d time(s) already "
                     "(--max-restarts %d): it ends here\n", cause.c_str(), round, o.max_restarts);
      break;
    }
    try {
      round = rounds ? rounds->join(round + 1, &cause) : round + 1;
      if (round > o.max_restarts) {
        std::fprintf(o.console, "ringtape launcher: round %d is past --max-restarts %d: the job ends here\n", round,
                     o.max_restarts);
        break;
      }
      checkpoint.clear();
      if (!rounds || o.node_rank == 0) {
        const std::filesystem::path ckpt = std::filesystem::path(run_dir) / "checkpoint.safetensors";
        if (!run_dir.empty() && std::filesystem::exists(ckpt)) checkpoint = ckpt.string();
        if (rounds) rounds->set_checkpoint(round, checkpoint);
      } else {
        checkpoint = rounds->checkpoint(round);
      }
    } catch (const std::exception& ex) {
      std::fprintf(o.console, "ringtape launcher: cannot restart: %s\n", ex.what());
      break;
    }
    std::fprintf(o.console, "ringtape launcher: restart %d of at most %d (%s): %s\n", round, o.max_restarts,
                 cause.c_str(),
                 checkpoint.empty() ? ("from the start" + (run_dir.empty() ? std::string() : " in " + run_dir) +
                                       " (no checkpoint was saved)").c_str()
                                    : ("resuming from " + checkpoint).c_str());
    std::fflush(o.console);
    status = 0;
  }
  std::error_code ec;
  std::filesystem::remove_all(flight_dir, ec);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
  return status;
}

}  // namespace rt::dist
