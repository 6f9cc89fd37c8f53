// The stacks of another process's threads (Note [Stacks of a stuck rank] in
// distributed/stack_dump.h): a child stopped by SIGSTOP while it spins in a known function,
// read with its file:line and left stopped; a process that is not there named.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "distributed/stack_dump.h"

namespace rt::dist {
namespace {

volatile long g_spins = 0;

__attribute__((noinline)) void stack_dump_test_spin() {
  for (;;) g_spins = g_spins + 1;
}

char state_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren == std::string::npos ? '?' : text[paren + 2];
}

TEST_CASE("a stopped child's threads are read with functions and file:line, and it stays stopped") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::thread([] { stack_dump_test_spin(); }).detach();
    stack_dump_test_spin();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  REQUIRE(kill(child, SIGSTOP) == 0);
  while (state_of(child) != 'T') std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const ProcessStacks s = read_stacks(child);
  const std::string text = stacks_text(s);
  INFO(text);
  CHECK(s.error.empty());
  REQUIRE(s.threads.size() == 2);
  CHECK(s.threads[0].tid == child);  // the main thread first
  REQUIRE(!s.threads[0].frames.empty());
  CHECK(s.threads[0].frames[0].function.find("stack_dump_test_spin") != std::string::npos);
  CHECK(s.threads[0].frames[0].file == "tests/distributed/stack_dump_test.cc");
  CHECK(s.threads[0].frames[0].line > 0);
  CHECK(text.find("thread " + std::to_string(child) + " (") != std::string::npos);
  const std::string where = main_thread_where(s);
  CHECK(where.rfind("tests/distributed/stack_dump_test.cc:", 0) == 0);
  CHECK(where.find("(rt::dist::(anonymous namespace)::stack_dump_test_spin()") != std::string::npos);
  CHECK(state_of(child) == 'T');  // still stopped after the launcher's look
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);

  const ProcessStacks gone = read_stacks(child);  // reaped: no such process
  CHECK(gone.threads.empty());
  CHECK(gone.error.find("pid " + std::to_string(child)) != std::string::npos);
  CHECK(stacks_text(gone).rfind("no stacks: ", 0) == 0);
  CHECK(main_thread_where(gone).empty());
}

}  // namespace
}  // namespace rt::dist
