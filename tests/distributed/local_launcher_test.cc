// The local launcher (distributed/local_launcher.h) with /bin/sh workers: the environment contract
// and pass-through, rank 0 on the console, a failed worker stopping the others and named with
// its last lines, SIGTERM forwarded, option checks. Each launcher runs in a forked process
// (tests/distributed/launch.h) so its signal handlers and exit status are its own.
#include "distributed/local_launcher.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/distributed/launch.h"
#include "tests/distributed/test_errors.h"

namespace rt::dist {
namespace {

using namespace std::chrono_literals;

LocalLaunchOptions sh(int n, const std::string& script) {
  LocalLaunchOptions o;
  o.nproc_per_node = n;
  o.grace = std::chrono::seconds(3);
  o.command = {"/bin/sh", "-c", script};
  return o;
}

testing::RankResult run_in_child(const LocalLaunchOptions& o, bool send_term = false) {
  testing::LaunchOptions lo;
  lo.limit = 20s;
  lo.env = {{"NCCL_DEBUG", "INFO"}};
  const auto r = testing::launch(
      1,
      [&](int) {
        if (send_term)
          std::thread([] {
            std::this_thread::sleep_for(700ms);
            kill(getpid(), SIGTERM);
          }).detach();
        return run_local_launcher(o);
      },
      lo);
  return r.ranks[0];
}

TEST_CASE("launcher: torchrun's environment per worker, NCCL_* passed through, rank 0 on the console") {
  const auto r = run_in_child(sh(3,
                                 "echo \"worker $RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE "
                                 "at $MASTER_ADDR:$MASTER_PORT nccl=$NCCL_DEBUG\""));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("worker 0/3 local 0/3 at 127.0.0.1:") != std::string::npos);
  CHECK(r.output.find("nccl=INFO") != std::string::npos);
  CHECK(r.output.find("worker 1/3") == std::string::npos);  // the others' output is kept, not printed
}

TEST_CASE("launcher: a failed worker stops the others; the launcher names it with its last lines") {
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_in_child(sh(3, "if [ $RANK = 1 ]; then echo line-a; echo boom-$RANK; exit 3; fi; sleep 30"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK(r.output.find("rank 1 failed (exit status 3)") != std::string::npos);
  CHECK(r.output.find("its last lines:\nline-a\nboom-1") != std::string::npos);
  CHECK(s < 10);  // the sleeping workers were stopped, not waited for
}

// Before: a stopped worker acted on SIGTERM only when continued, so the launcher waited the
// whole grace period (30 s by default) before its SIGKILL.
TEST_CASE("launcher: a stopped worker (SIGSTOP) is continued with the SIGTERM, not waited for") {
  LocalLaunchOptions o = sh(2, "if [ $RANK = 1 ]; then trap 'exit 143' TERM; kill -STOP $$; sleep 30; fi; "
                               "sleep 0.5; exit 3");
  o.grace = std::chrono::seconds(15);
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_in_child(o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK(r.output.find("rank 0 failed (exit status 3)") != std::string::npos);
  CHECK(s < 8);
}

TEST_CASE("launcher: SIGTERM is forwarded to every worker; exit 128 + 15") {
  const auto r = run_in_child(sh(2, "trap 'echo got-TERM-$RANK; exit 143' TERM; sleep 30 & wait"), true);
  INFO(r.output);
  CHECK(r.exit_code == 128 + SIGTERM);
  CHECK(r.output.find("got-TERM-0") != std::string::npos);
  CHECK(r.output.find("stopping the workers") != std::string::npos);
}

TEST_CASE("launcher: a worker that cannot start is a failed worker") {
  LocalLaunchOptions o = sh(2, "");
  o.command = {"/nonexistent/ringtape"};
  const auto r = run_in_child(o);
  INFO(r.output);
  CHECK(r.exit_code == 127);
  CHECK(r.output.find("cannot start worker /nonexistent/ringtape") != std::string::npos);
}

TEST_CASE("launcher: option checks") {
  LocalLaunchOptions o = sh(2, "true");
  o.nnodes = 2;
  CHECK(testing::error_of([&] { run_local_launcher(o); }).find("master_port is needed with nnodes > 1") !=
        std::string::npos);
  o.nnodes = 1;
  o.node_rank = 1;
  CHECK(testing::error_of([&] { run_local_launcher(o); }).find("node_rank must be in [0, 1)") != std::string::npos);
  CHECK(last_lines("a\nb\nc\n", 2) == "b\nc");
  CHECK(last_lines("only", 3) == "only");
}

}  // namespace
}  // namespace rt::dist
