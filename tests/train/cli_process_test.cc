// The `ringtape` binary as a user runs it: exit statuses (2 for bad input), signals during
// training (Note [Interrupts], train/interrupt.h), and output directories that are never
// another run's. Every child is waited for with a deadline and killed if it overstays.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "tests/train/process_util.h"

extern char** environ;

namespace rt {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string binary() { return test::ringtape_binary(); }
fs::path tmpdir(const std::string& name) { return test::fresh_dir("cli_process_test_", name); }
std::string read(const fs::path& p) { return test::read_file(p); }

// A running `ringtape` with stdout and stderr in files under `logs`.
struct Proc {
  pid_t pid = -1;
  fs::path out, err;
};

Proc start(const std::vector<std::string>& args, const fs::path& logs) {
  Proc p{-1, logs / "stdout.txt", logs / "stderr.txt"};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, p.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, p.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> all = {binary()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = posix_spawn(&p.pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE_MESSAGE(rc == 0, "cannot start ", all[0]);
  return p;
}

// The child's wait status; a child still running after `seconds` is killed and fails the test.
int wait_for(const Proc& p, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (waitpid(p.pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      FAIL("ringtape still running after ", seconds, " s; stdout:\n", read(p.out), "\nstderr:\n", read(p.err));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status;
}

// Waits until the child has logged a training step (so a signal lands mid-training).
void wait_for_step(const Proc& p, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (read(p.out).find(" step ") == std::string::npos) {
    int status = 0;
    REQUIRE_MESSAGE(waitpid(p.pid, &status, WNOHANG) == 0, "ringtape ended before its first step; stderr:\n",
                    read(p.err));
    if (Clock::now() > deadline) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      FAIL("no training step logged after ", seconds, " s; stderr:\n", read(p.err));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Runs to the end; returns the exit status (-1 if killed by a signal).
int run(const std::vector<std::string>& args, const fs::path& logs, double seconds = 120) {
  const int status = wait_for(start(args, logs), seconds);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> temp_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) out.push_back(e.path().string());
  return out;
}

// Training long enough to be interrupted: 4096 tiny images, 512 steps per epoch, 100 epochs.
std::vector<std::string> long_run(const fs::path& out) {
  return {"train", "--dataset", "synthetic", "--synthetic-size", "4096x1x8x8", "--num-classes", "4", "--width", "4",
          "--batch-size", "8", "--epochs", "100", "--print-freq", "1", "--workers", "1", "--device", "cpu",
          "--threads", "1", "--output-dir", out.string()};
}

std::vector<std::string> tiny_run(const fs::path& out, const std::string& model = "resnet18") {
  return {"train", "--model", model, "--dataset", "synthetic", "--synthetic-size", "64x1x8x8", "--num-classes", "4",
          "--width", "4", "--batch-size", "8", "--steps", "2", "--workers", "0", "--device", "cpu", "--output-dir",
          out.string()};
}

// A pid that ran and is gone (a child that exited and was reaped).
pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

TEST_CASE("bad values exit with status 2 and name the flag") {
  const fs::path logs = tmpdir("bad_values");
  const std::vector<std::vector<std::string>> cases = {
      {"--batch-size", "0"}, {"--epochs", "0"}, {"--lr", "-1"}, {"--threads", "-1"}, {"--num-classes", "-5"},
      {"--label-smoothing", "2"}, {"--bogus", "1"}};
  for (const auto& c : cases) {
    std::vector<std::string> args = {"train", "--dataset", "synthetic", "--output-dir", (logs / "out").string()};
    args.insert(args.end(), c.begin(), c.end());
    CAPTURE(c[0]);
    CHECK(run(args, logs) == 2);
    CHECK(read(logs / "stderr.txt").find(c[0]) != std::string::npos);
  }
}

TEST_CASE("weights that do not match the model exit 2; a run's directory is never another run's") {
  const fs::path a = tmpdir("run_a"), b = tmpdir("run_b"), logs = tmpdir("match_logs");
  REQUIRE(run(tiny_run(a), logs) == 0);
  REQUIRE(run(tiny_run(b, "resnet34"), logs) == 0);
  const std::vector<std::string> eval = {"eval", "--dataset", "synthetic", "--synthetic-size", "64x1x8x8",
                                         "--num-classes", "4", "--width", "4", "--workers", "0", "--device", "cpu"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = eval;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  CHECK(run(with({"--model", "resnet34", "--init-weights", (a / "model.safetensors").string()}), logs) == 2);
  CHECK(read(logs / "stderr.txt").find("96 missing") != std::string::npos);
  CHECK(run(with({"--checkpoint", (b / "checkpoint.safetensors").string()}), logs) == 2);
  CHECK(run(with({"--checkpoint", (a / "model.safetensors").string()}), logs) == 2);
  CHECK(read(logs / "stderr.txt").find("--init-weights") != std::string::npos);
  CHECK(run(with({"--init-weights", (a / "checkpoint.safetensors").string()}), logs) == 0);
  CHECK(read(logs / "stdout.txt").find("a ringtape checkpoint") != std::string::npos);

  // Resuming run A into run B's directory would overwrite B: refused, B untouched.
  const std::string b_ckpt = read(b / "checkpoint.safetensors"), b_model = read(b / "model.safetensors");
  std::vector<std::string> resume = tiny_run(b);
  resume.insert(resume.end(), {"--resume", (a / "checkpoint.safetensors").string(), "--steps", "3"});
  CHECK(run(resume, logs) == 2);
  CHECK(read(logs / "stderr.txt").find("holds another run") != std::string::npos);
  CHECK(read(b / "checkpoint.safetensors") == b_ckpt);
  CHECK(read(b / "model.safetensors") == b_model);
}

TEST_CASE("SIGINT: the step finishes, a checkpoint is written, exit 130, no temporary file; stale ones go") {
  const fs::path out = tmpdir("sigint");
  const pid_t gone = dead_pid();
  const fs::path stale = out / ("checkpoint.safetensors.tmp." + std::to_string(gone));
  std::ofstream(stale) << "left by a kill -9";
  const Proc p = start(long_run(out), tmpdir("sigint_logs"));
  wait_for_step(p, 120);
  REQUIRE(kill(p.pid, SIGINT) == 0);
  const int status = wait_for(p, 120);
  REQUIRE_MESSAGE(WIFEXITED(status), "killed by signal ", WTERMSIG(status), "; stderr:\n", read(p.err));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK(read(p.err).find("interrupted by SIGINT") != std::string::npos);
  CHECK(read(p.out).find("removed " + stale.string()) != std::string::npos);
  CHECK(temp_files(out).empty());
  CHECK_FALSE(fs::exists(out / "model.safetensors"));  // the run did not finish
  std::map<std::string, std::string> meta;
  const auto ckpt = load_safetensors((out / "checkpoint.safetensors").string(), &meta);
  CHECK(ckpt.count("model.conv1.weight"));
  const int64_t step = std::stoll(meta.at("step"));
  CHECK(step >= 1);
  // It resumes.
  std::vector<std::string> resume = long_run(out);
  resume.insert(resume.end(), {"--resume", (out / "checkpoint.safetensors").string(), "--steps",
                               std::to_string(step + 2)});
  CHECK(run(resume, tmpdir("sigint_resume_logs")) == 0);
}

TEST_CASE("SIGTERM exits 143 with a checkpoint; a second SIGINT quits at once without temporary files") {
  const fs::path out = tmpdir("sigterm");
  Proc p = start(long_run(out), tmpdir("sigterm_logs"));
  wait_for_step(p, 120);
  REQUIRE(kill(p.pid, SIGTERM) == 0);
  int status = wait_for(p, 120);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 143);
  CHECK(fs::exists(out / "checkpoint.safetensors"));
  CHECK(temp_files(out).empty());

  const fs::path out2 = tmpdir("double");
  p = start(long_run(out2), tmpdir("double_logs"));
  wait_for_step(p, 120);
  REQUIRE(kill(p.pid, SIGINT) == 0);
  REQUIRE(kill(p.pid, SIGINT) == 0);
  status = wait_for(p, 60);
  // Normally the second signal kills it; if the first one's save had already finished, it
  // exited 130 on its own.
  CHECK_MESSAGE(((WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) ||
                 (WIFEXITED(status) && WEXITSTATUS(status) == 130)), "status ", status);
  CHECK(temp_files(out2).empty());
}

TEST_CASE("doctor: the exit status follows the verdict, --help documents it, a bad flag exits 2") {
  const fs::path logs = tmpdir("doctor");
  const int status = run({"doctor"}, logs, 60);
  const std::string out = read(logs / "stdout.txt");
  CAPTURE(out);
  const bool usable = out.find("\nverdict: ready for ") != std::string::npos ||
                      out.find("\nverdict: CPU only: ") != std::string::npos;
  CHECK(status == (usable ? 0 : 1));
  CHECK(run({"doctor", "--help"}, logs, 60) == 0);
  CHECK(read(logs / "stdout.txt").find("exit status: 0 when the verdict is usable") != std::string::npos);
  CHECK(run({"doctor", "--ports", "0"}, logs, 60) == 2);
}

}  // namespace
}  // namespace rt

namespace rt {
namespace {

TEST_CASE("--profile-steps: the table, profile.json and trace.json; the epoch's memory line and record") {
  const fs::path out = tmpdir("profile");
  // 64 images in batches of 8: one epoch of 8 steps, profiled 3..5, then evaluated.
  std::vector<std::string> args = {"train", "--dataset", "synthetic", "--synthetic-size", "64x1x8x8",
                                   "--num-classes", "4", "--width", "4", "--batch-size", "8", "--epochs", "1",
                                   "--workers", "1", "--device", "cpu", "--threads", "1", "--output-dir",
                                   out.string(), "--profile-steps", "3:6", "--profile-group", "layer"};
  REQUIRE(run(args, out) == 0);
  const std::string so = read(out / "stdout.txt");
  CHECK(so.find("profile of steps 3-5 on cpu") != std::string::npos);
  // Grouped by layer: rows are module paths (which ones make the top 30 depends on timing).
  CHECK(so.find("\nlayer ") != std::string::npos);
  CHECK(so.find(".conv") != std::string::npos);
  CHECK(so.find("memory of the last profiled step") != std::string::npos);
  CHECK(so.find("epoch 0 memory cpu: peak") != std::string::npos);
  const json::Value prof = json::parse(read(out / "profile.json"));
  CHECK(prof.find("first_step")->as_int() == 3);
  CHECK(prof.find("last_step")->as_int() == 5);
  CHECK(prof.find("totals")->find("steps")->as_int() == 3);
  CHECK(prof.find("memory")->as_array().size() == 3);
  CHECK(!prof.find("by_op")->as_array().empty());
  const json::Value trace = json::parse(read(out / "trace.json"));
  CHECK(trace.find("traceEvents")->as_array().size() > 100);
  // The loader's thread has its own track.
  CHECK(read(out / "trace.json").find("\"loader\"") != std::string::npos);
  // metrics.jsonl: a memory record after the evaluation, with the allocator's tags.
  bool memory = false;
  std::istringstream lines(read(out / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const json::Value r = json::parse(line);
    if (r.find("type")->as_string() != "memory") continue;
    memory = true;
    CHECK(r.find("device")->as_string() == "cpu");
    CHECK(r.find("peak_allocated_bytes")->as_int() > 0);
    CHECK(r.find("at_peak")->find("activations")->as_int() > 0);
    CHECK(r.find("at_peak")->find("parameters")->as_int() >= 0);
  }
  CHECK(memory);

  // Bad values: exit 2, naming the flag.
  args.back() = "layers";
  CHECK(run(args, out) == 2);
  CHECK(read(out / "stderr.txt").find("--profile-group") != std::string::npos);
  args[args.size() - 3] = "5:5";
  args.back() = "op";
  CHECK(run(args, out) == 2);
  CHECK(read(out / "stderr.txt").find("--profile-steps") != std::string::npos);
}

TEST_CASE("ringtape eval --profile-steps profiles evaluation batches into --profile-dir") {
  const fs::path out = tmpdir("profile_eval");
  REQUIRE(run(tiny_run(out), out) == 0);
  const fs::path pdir = out / "eval_profile";
  REQUIRE(run({"eval", "--dataset", "synthetic", "--synthetic-size", "64x1x8x8", "--num-classes", "4", "--width", "4",
               "--batch-size", "8", "--workers", "0", "--device", "cpu", "--init-weights",
               (out / "model.safetensors").string(), "--profile-steps", "2:4", "--profile-dir", pdir.string()},
              out) == 0);
  CHECK(read(out / "stdout.txt").find("profile of steps 2-3 on cpu") != std::string::npos);
  const json::Value prof = json::parse(read(pdir / "profile.json"));
  CHECK(prof.find("totals")->find("backward_seconds")->as_double() == 0);  // evaluation: forward only
  CHECK(fs::exists(pdir / "trace.json"));
}

}  // namespace
}  // namespace rt
