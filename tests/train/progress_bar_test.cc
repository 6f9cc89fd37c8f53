// The progress bar (train/progress_bar.h): the line format_bar() makes at any width, the
// throttled redraws of ProgressBar, and the real `ringtape train` on a pseudo-terminal (a bar
// redrawn with "\r", the evaluation lines on lines of their own) and on a pipe (the plain
// --print-freq lines, no "\r").
#include <doctest/doctest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/train/process_util.h"
#include "train/progress_bar.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
using train::BarState;
using train::format_bar;
using train::format_duration;

// The bar of the example in train/progress_bar.h.
BarState example() {
  BarState s;
  s.epoch = 3;
  s.epochs = 90;
  s.step = 412;
  s.steps = 1251;
  s.img_per_s = 1843;
  s.loss = 2.314;
  s.lr = 0.1;
  s.eta_epoch_s = 7 * 60 + 12;
  s.eta_run_s = 9 * 3600 + 31 * 60;
  return s;
}

TEST_CASE("format_duration: seconds, minutes, hours, days; unknown is ?") {
  CHECK(format_duration(0) == "0s");
  CHECK(format_duration(59.4) == "59s");
  CHECK(format_duration(7 * 60 + 12) == "7m12s");
  CHECK(format_duration(3600) == "1h00m");
  CHECK(format_duration(9 * 3600 + 31 * 60 + 5) == "9h31m");
  CHECK(format_duration(2 * 86400 + 3 * 3600) == "2d03h");
  CHECK(format_duration(1e300) == "11574074074d01h");  // clamped at 1e15 s, no overflow
  CHECK(format_duration(NAN) == "?");
  CHECK(format_duration(INFINITY) == "?");
  CHECK(format_duration(-1) == "?");
}

TEST_CASE("format_bar at 200, 80 and 40 columns: the bar shrinks, then fields go") {
  const BarState s = example();
  const std::string fields = "412/1251 | 1843 img/s | loss 2.314 | lr 0.1 | eta 7m12s";
  // 200: everything, the bar at its widest (50), 412/1251 of it filled.
  CHECK(format_bar(s, 200) ==
        "epoch 3/90 [" + std::string(16, '#') + std::string(34, '.') + "] " + fields + " (run 9h31m)");
  // 80: no room for the run's eta beside a bar of 10; the line ends before the last column.
  const std::string at80 = format_bar(s, 80);
  CHECK(at80 == "epoch 3/90 [###.......] " + fields);
  CHECK(at80.size() == 79);
  // 40: no bar; the epoch's eta stays.
  CHECK(format_bar(s, 40) == "epoch 3/90 412/1251 | eta 7m12s");
}

TEST_CASE("format_bar: never as wide as the terminal, whatever the numbers") {
  BarState huge = example();
  huge.epoch = huge.epochs = 1000000000000;
  huge.step = huge.steps = 9000000000000000000;
  huge.img_per_s = 3.2e15;
  huge.loss = 1.5e30;
  huge.lr = 1e-12;
  huge.eta_epoch_s = huge.eta_run_s = 1e300;
  BarState unknown;  // the first draw: no rate, loss or eta yet
  unknown.steps = 8;
  for (const BarState& s : {example(), huge, unknown})
    for (int columns : {-3, 0, 1, 2, 10, 25, 40, 57, 80, 120, 200, 1000}) {
      const std::string line = format_bar(s, columns);
      CAPTURE(columns);
      CAPTURE(line);
      CHECK(!line.empty());
      CHECK(int(line.size()) < std::max(columns, 2));
      CHECK(line.find_first_of("\r\n") == std::string::npos);
    }
  const std::string wide = format_bar(huge, 1000);
  CHECK(wide.find("3.2P img/s") != std::string::npos);
  CHECK(wide.find("[" + std::string(50, '#') + "]") != std::string::npos);
  CHECK(wide.find("loss 1.5e+30") != std::string::npos);
  CHECK(format_bar(unknown, 200) == "epoch 1/1 [" + std::string(50, '.') +
                                        "] 0/8 | - img/s | loss - | lr - | eta ? (run ?)");
  BarState empty_epoch;  // no steps in the epoch: an empty bar, no division by zero
  CHECK(format_bar(empty_epoch, 80).find("[..........") != std::string::npos);
}

// What `bar` wrote to its file.
std::string written(std::FILE* f) {
  std::fflush(f);
  std::string s(size_t(std::ftell(f)), '\0');
  std::rewind(f);
  CHECK(std::fread(s.data(), 1, s.size(), f) == s.size());
  return s;
}

TEST_CASE("ProgressBar: at most one draw per interval unless forced; finish ends the line once") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  {
    train::ProgressBar bar(f, 60, std::chrono::hours(1));
    BarState s = example();
    CHECK(bar.update(s));       // the first draw is never held back
    CHECK_FALSE(bar.update(s));  // within the interval
    s.step = s.steps;
    CHECK(bar.update(s, /*force=*/true));  // the epoch's end
    bar.finish();
    bar.finish();           // nothing more: the line is ended
    CHECK(bar.update(s));   // a new line starts at once
  }  // the destructor ends that line
  const std::string line = format_bar(example(), 60);
  BarState end = example();
  end.step = end.steps;
  const std::string last = format_bar(end, 60);
  CHECK(written(f) == "\r" + line + "\033[K\r" + last + "\033[K\n\r" + last + "\033[K\n");
  std::fclose(f);
}

TEST_CASE("bar_columns: 0 with --no-progress, and when stdout is not a terminal") {
  CHECK(train::bar_columns(false) == 0);
  if (!isatty(STDOUT_FILENO)) CHECK(train::bar_columns(true) == 0);
}

// ---- The real binary on a pseudo-terminal and on a pipe.

// 64 tiny images, batch 8: 2 epochs of 8 steps, a line per step; about a second on one core.
std::vector<std::string> tiny_run(const fs::path& out, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {test::ringtape_binary(), "train", "--dataset", "synthetic", "--synthetic-size",
                                "64x1x8x8", "--num-classes", "4", "--width", "4", "--batch-size", "8", "--epochs",
                                "2", "--print-freq", "1", "--workers", "0", "--device", "cpu", "--threads", "1",
                                "--output-dir", out.string()};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

[[noreturn]] void exec(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  _exit(127);
}

// Reads `fd` until its writer is gone (EOF, or EIO on a pty's master), then reaps `pid`;
// requires exit status 0 within `seconds`. Returns everything read.
std::string drain_and_wait(int fd, pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      const ssize_t k = read(fd, buf, sizeof buf);
      if (k > 0) {
        out.append(buf, size_t(k));
        continue;
      }
      if (k == 0 || errno == EIO) break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      FAIL("ringtape still running after ", seconds, " s; its output:\n", out);
    }
  }
  close(fd);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "status ", status, "; output:\n", out);
  return out;
}

// `args` run with stdout and stderr on a pseudo-terminal `columns` wide, with TERM=`term`.
std::string run_on_pty(const std::vector<std::string>& args, int columns, const char* term) {
  winsize ws{};
  ws.ws_row = 24;
  ws.ws_col = (unsigned short)columns;
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, &ws);
  REQUIRE_MESSAGE(pid >= 0, "forkpty: ", std::strerror(errno));
  if (pid == 0) {
    setenv("TERM", term, 1);
    exec(args);
  }
  return drain_and_wait(master, pid, 60);
}

std::string run_on_pipe(const std::vector<std::string>& args) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    setenv("TERM", "xterm", 1);
    exec(args);
  }
  close(fds[1]);
  return drain_and_wait(fds[0], pid, 60);
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

TEST_CASE("ringtape train on a terminal draws the bar; on a pipe it prints the plain lines") {
  const fs::path dir = test::fresh_dir("progress_bar_test_", "runs");
  const std::string tty = run_on_pty(tiny_run(dir / "tty"), 100, "xterm");
  CAPTURE(tty);
  // A bar per epoch, redrawn in place, and drawn at each epoch's end.
  CHECK(count(tty, "\repoch 1/2 [") >= 2);
  CHECK(count(tty, "\repoch 2/2 [") >= 2);
  CHECK(tty.find("] 8/8 | ") != std::string::npos);
  CHECK(tty.find("img/s | loss ") != std::string::npos);
  CHECK(tty.find("\033[K") != std::string::npos);
  // The bar replaces the step lines; the evaluation and last lines start lines of their own.
  CHECK(tty.find("epoch 0 step ") == std::string::npos);
  for (const char* line : {"epoch 0 eval: ", "epoch 1 eval: ", "done: 16 steps"}) {
    CAPTURE(line);
    const size_t at = tty.find(line);
    REQUIRE(at != std::string::npos);
    CHECK(tty[at - 1] == '\n');
  }
  // Every drawn line fits the 100 columns.
  size_t start = 0;
  for (size_t i = 0; i <= tty.size(); ++i)
    if (i == tty.size() || tty[i] == '\r' || tty[i] == '\n') {
      std::string seg = tty.substr(start, i - start);
      if (const size_t k = seg.find("\033[K"); k != std::string::npos) seg.erase(k);
      if (seg.rfind("epoch ", 0) == 0 && seg.find(" [") != std::string::npos) CHECK(seg.size() < 100);  // a bar
      start = i + 1;
    }
  // The --print-freq records still go to metrics.jsonl.
  CHECK(count(test::read_file(dir / "tty" / "metrics.jsonl"), "\"type\":\"train\"") == 16);

  const std::string piped = run_on_pipe(tiny_run(dir / "pipe"));
  CAPTURE(piped);
  CHECK(piped.find('\r') == std::string::npos);
  CHECK(piped.find("\033[") == std::string::npos);
  CHECK(piped.find("epoch 0 step 1/16  loss ") != std::string::npos);
  CHECK(piped.find("epoch 1 step 16/16  loss ") != std::string::npos);
  CHECK(piped.find("epoch 1 eval: ") != std::string::npos);
}

TEST_CASE("on a terminal, --no-progress and TERM=dumb print the plain lines") {
  const fs::path dir = test::fresh_dir("progress_bar_test_", "plain");
  const std::string no_progress = run_on_pty(tiny_run(dir / "a", {"--no-progress", "--epochs", "1"}), 100, "xterm");
  const std::string dumb = run_on_pty(tiny_run(dir / "b", {"--epochs", "1"}), 100, "dumb");
  for (const std::string& out : {no_progress, dumb}) {
    CAPTURE(out);
    CHECK(out.find("\repoch") == std::string::npos);
    CHECK(out.find("\033[K") == std::string::npos);
    CHECK(out.find("epoch 0 step 8/8  loss ") != std::string::npos);
  }
}

}  // namespace
}  // namespace rt
