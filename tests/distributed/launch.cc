#include "tests/distributed/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <sstream>

#include "distributed/net_util.h"
#include "base/error.h"

namespace rt::dist::testing {

using Clock = std::chrono::steady_clock;

int free_port() { return net::local_port(net::listen_tcp("127.0.0.1", 0).get()); }

bool LaunchResult::ok() const {
  return std::all_of(ranks.begin(), ranks.end(), [](const RankResult& r) { return r.exit_code == 0; });
}

std::vector<int> LaunchResult::hung() const {
  std::vector<int> out;
  for (const auto& r : ranks)
    if (r.hung) out.push_back(r.rank);
  return out;
}

std::string LaunchResult::report() const {
  std::ostringstream os;
  os << ranks.size() << " ranks, " << seconds << " s, MASTER_PORT " << port << "\n";
  for (const auto& r : ranks) {
    os << "rank " << r.rank << ": ";
    if (r.hung) os << "HUNG, killed at the limit";
    else if (r.signal) os << "killed by signal " << r.signal << " (" << strsignal(r.signal) << ")";
    else os << "exit " << r.exit_code;
    os << "\n";
  }
  for (const auto& r : ranks)
    if (r.exit_code != 0 && !r.output.empty()) os << "--- rank " << r.rank << " output ---\n" << r.output << "\n";
  return os.str();
}

namespace {

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of the rank's stdout+stderr pipe
  bool running = false;
};

// What a forked rank does before its work: its own process group (so a kill reaches its
// children too), death with the launcher, the torchrun environment, output into the pipe.
void become_rank(int rank, int world, int port, const LaunchOptions& opts, pid_t launcher, int out_fd) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(111);  // the launcher died before prctl took effect
  dup2(out_fd, STDOUT_FILENO);
  dup2(out_fd, STDERR_FILENO);
  close(out_fd);
  const std::map<std::string, std::string> torchrun = {
      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)},
      {"RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(world)}};
  for (const auto& [k, v] : torchrun) setenv(k.c_str(), v.c_str(), 1);
  for (const auto& [k, v] : opts.env) setenv(k.c_str(), v.c_str(), 1);
}

// Starts the ranks, collects them, and kills whatever is left at the limit or when the
// launcher itself fails (the destructor path). `run(rank)` runs in the child and never returns.
class Launch {
 public:
  Launch(int world, const LaunchOptions& opts) : opts_(opts), children_(world) {
    result_.port = opts.port ? opts.port : free_port();
    result_.ranks.resize(world);
    for (int r = 0; r < world; ++r) result_.ranks[r].rank = r;
  }
  ~Launch() {
    for (auto& c : children_) {
      if (c.running) {
        kill(-c.pid, SIGKILL);
        waitpid(c.pid, nullptr, 0);
      }
      if (c.out >= 0) close(c.out);
    }
  }

  template <typename Run>
  LaunchResult run(const Run& run_rank) {
    const auto start = Clock::now();
    const pid_t self = getpid();
    std::cout.flush();  // the children inherit unflushed buffers otherwise
    std::fflush(nullptr);
    for (int r = 0; r < int(children_.size()); ++r) {
      int fds[2];
      RT_CHECK(pipe2(fds, O_CLOEXEC) == 0, "launch: pipe: ", std::strerror(errno));
      const pid_t pid = fork();
      RT_CHECK(pid >= 0, "launch: fork: ", std::strerror(errno));
      if (pid == 0) {
        close(fds[0]);
        become_rank(r, int(children_.size()), result_.port, opts_, self, fds[1]);
        run_rank(r);  // never returns
      }
      setpgid(pid, pid);  // also here, so a kill right after fork reaches the group
      close(fds[1]);
      fcntl(fds[0], F_SETFL, O_NONBLOCK);
      children_[r] = {pid, fds[0], true};
    }
    collect(start + opts_.limit);
    result_.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return result_;
  }

 private:
  void read_output(int r) {
    char buf[16384];
    ssize_t k;
    std::string& out = result_.ranks[r].output;
    while ((k = read(children_[r].out, buf, sizeof buf)) > 0) out.append(buf, size_t(k));
    if (out.size() > kMaxOutput) out.erase(0, out.size() - kMaxOutput);
  }

  // Reaps rank r if it ended; at the limit (`late`) kills it first. The group is killed
  // while the rank is still a zombie (WNOWAIT), so its pid, the group's id, cannot have been
  // reused by an unrelated process.
  void try_reap(int r, bool late) {
    Child& c = children_[r];
    siginfo_t info{};
    const bool ended = waitid(P_PID, c.pid, &info, WEXITED | WNOWAIT | WNOHANG) == 0 && info.si_pid != 0;
    if (!ended) {
      if (!late) return;
      kill(-c.pid, SIGKILL);
      result_.ranks[r].hung = true;
    }
    kill(-c.pid, SIGKILL);  // any children it left behind
    int status = 0;
    waitpid(c.pid, &status, 0);
    c.running = false;
    if (WIFEXITED(status)) result_.ranks[r].exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result_.ranks[r].signal = WTERMSIG(status);
  }

  void collect(Clock::time_point deadline) {
    const int n = int(children_.size());
    while (true) {
      std::vector<pollfd> fds;
      for (int r = 0; r < n; ++r) fds.push_back({children_[r].out, POLLIN, 0});
      // Exits are not pollable here; 20 ms slices find them soon enough for a test.
      poll(fds.data(), fds.size(), 20);
      for (int r = 0; r < n; ++r) read_output(r);
      const bool late = Clock::now() >= deadline;
      bool any_running = false;
      for (int r = 0; r < n; ++r) {
        if (children_[r].running) try_reap(r, late);
        any_running |= children_[r].running;
      }
      if (!any_running) break;
    }
    for (int r = 0; r < n; ++r) read_output(r);  // what was written just before the end
  }

  LaunchOptions opts_;
  std::vector<Child> children_;
  LaunchResult result_;
};

}  // namespace

LaunchResult launch(int world, const std::function<int(int rank)>& body, const LaunchOptions& opts) {
  Launch l(world, opts);
  return l.run([&](int rank) {
    int code = 1;
    try {
      code = body(rank);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    } catch (...) {
      std::fprintf(stderr, "rank %d: an exception that is not a std::exception\n", rank);
    }
    std::cout.flush();
    std::fflush(nullptr);
    _exit(code);  // not exit(): the test framework's atexit reports belong to the parent
  });
}

LaunchResult launch_exec(int world, const std::vector<std::string>& argv, const LaunchOptions& opts) {
  RT_CHECK(!argv.empty(), "launch_exec: no program given");
  Launch l(world, opts);
  return l.run([&](int) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "launch_exec: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  });
}

}  // namespace rt::dist::testing
