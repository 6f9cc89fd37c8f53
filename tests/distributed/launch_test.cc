// The multi-process test launcher itself: exit codes, output, torchrun's environment, the
// hard limit (a hanging rank is killed and reported), and no process left behind: not a
// rank's children, not the ranks of a launcher that dies.
#include "tests/distributed/launch.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "base/error.h"

namespace rt::dist::testing {
namespace {

using namespace std::chrono_literals;

// Whether `pid` has ended (gone, or a zombie nobody reaped yet) within `wait`.
bool ended(pid_t pid, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  do {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string pid_field, comm, state;
    if (!(stat >> pid_field >> comm >> state) || state == "Z") return true;
    std::this_thread::sleep_for(10ms);
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

// The number after `tag` in `text` ("grandchild 1234"), or -1.
pid_t number_after(const std::string& text, const std::string& tag) {
  const auto at = text.find(tag);
  return at == std::string::npos ? -1 : std::atoi(text.c_str() + at + tag.size());
}

// A process that outlives its parent unless someone kills it; its pid is printed.
void spawn_sleeper() {
  const pid_t pid = fork();
  if (pid == 0) {
    while (true) pause();
  }
  std::printf("grandchild %d\n", pid);
  std::fflush(stdout);
}

TEST_CASE("launch: exit codes, output and torchrun's environment per rank") {
  const auto r = launch(3, [](int rank) {
    std::printf("rank %s of %s at %s:%s local %s/%s\n", std::getenv("RANK"), std::getenv("WORLD_SIZE"),
                std::getenv("MASTER_ADDR"), std::getenv("MASTER_PORT"), std::getenv("LOCAL_RANK"),
                std::getenv("LOCAL_WORLD_SIZE"));
    std::fprintf(stderr, "to stderr\n");
    return rank == 1 ? 5 : 0;
  });
  REQUIRE(r.ranks.size() == 3);
  CHECK_FALSE(r.ok());
  CHECK(r.hung().empty());
  const std::string port = std::to_string(r.port);
  for (int rank = 0; rank < 3; ++rank) {
    CHECK(r.ranks[rank].exit_code == (rank == 1 ? 5 : 0));
    CHECK(r.ranks[rank].output.find("rank " + std::to_string(rank) + " of 3 at 127.0.0.1:" + port + " local " +
                                    std::to_string(rank) + "/3") != std::string::npos);
    CHECK(r.ranks[rank].output.find("to stderr") != std::string::npos);
  }
  CHECK(r.report().find("rank 1: exit 5") != std::string::npos);
  CHECK(r.report().find("--- rank 1 output ---") != std::string::npos);
  CHECK(r.report().find("--- rank 0 output ---") == std::string::npos);  // only failing ranks' output
}

TEST_CASE("launch: an exception in a rank is its exit 1 and message") {
  const auto r = launch(1, [](int) -> int { RT_FAIL("bad thing"); });
  CHECK(r.ranks[0].exit_code == 1);
  CHECK(r.ranks[0].output.find("rank 0: bad thing") != std::string::npos);
}

TEST_CASE("launch: a rank still running at the limit is killed, with its children, and reported") {
  const auto r = launch(
      3,
      [](int rank) {
        if (rank == 1) {
          spawn_sleeper();
          while (true) pause();
        }
        return 0;
      },
      {.limit = 500ms, .port = 0, .env = {}});
  INFO(r.report());
  CHECK(r.hung() == std::vector<int>{1});
  CHECK(r.ranks[1].signal == SIGKILL);
  CHECK(r.ranks[0].exit_code == 0);
  CHECK(r.ranks[2].exit_code == 0);
  CHECK(r.seconds >= 0.5);
  CHECK(r.seconds < 2);
  CHECK(r.report().find("rank 1: HUNG, killed at the limit") != std::string::npos);
  const pid_t grandchild = number_after(r.ranks[1].output, "grandchild ");
  REQUIRE(grandchild > 0);
  CHECK(ended(grandchild, 1s));
}

TEST_CASE("launch: what a rank leaves running is killed when it exits") {
  const auto r = launch(2, [](int) {
    spawn_sleeper();
    return 0;
  });
  INFO(r.report());
  CHECK(r.ok());
  CHECK(r.seconds < 2);  // not held up by the sleepers holding the output pipes
  for (const auto& rank : r.ranks) CHECK(ended(number_after(rank.output, "grandchild "), 1s));
}

TEST_CASE("launch: the ranks of a launcher that dies die with it") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t launcher = fork();
  if (launcher == 0) {
    close(fds[0]);
    launch(1, [&](int) {
      const std::string pid = std::to_string(getpid()) + "\n";
      if (write(fds[1], pid.data(), pid.size()) < 0) return 1;
      while (true) pause();
    });
    _exit(0);
  }
  close(fds[1]);
  char buf[32] = {};
  REQUIRE(read(fds[0], buf, sizeof buf - 1) > 0);
  close(fds[0]);
  const pid_t rank = std::atoi(buf);
  REQUIRE(rank > 0);
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  CHECK(ended(rank, 2s));
}

TEST_CASE("launch_exec: a program per rank, and one that cannot start") {
  const auto r = launch_exec(2, {"/bin/sh", "-c", "echo rank $RANK of $WORLD_SIZE $EXTRA; exit $RANK"},
                             {.limit = 5s, .port = 0, .env = {{"EXTRA", "x"}}});
  CHECK(r.ranks[0].exit_code == 0);
  CHECK(r.ranks[1].exit_code == 1);
  CHECK(r.ranks[1].output == "rank 1 of 2 x\n");
  const auto missing = launch_exec(1, {"/nonexistent/binary"});
  CHECK(missing.ranks[0].exit_code == 127);
  CHECK(missing.ranks[0].output.find("cannot run /nonexistent/binary") != std::string::npos);
}

TEST_CASE("launch: free ports are free") {
  const int a = free_port(), b = free_port();
  CHECK(a > 0);
  CHECK(b > 0);
}

}  // namespace
}  // namespace rt::dist::testing
