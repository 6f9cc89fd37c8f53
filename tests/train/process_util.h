// What the tests that run the `ringtape` binary share: where Bazel put it, a fresh scratch
// directory per case, reading a file the process wrote, running it to its end within a time
// limit, and comparing the weights two runs saved.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/tensor.h"

namespace rt::test {

inline std::string ringtape_binary() {
  const char* src = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  REQUIRE_MESSAGE((src && ws), "run under bazel test (TEST_SRCDIR / TEST_WORKSPACE)");
  return std::string(src) + "/" + ws + "/cli/ringtape";
}

// $TEST_TMPDIR/<prefix><name>, emptied and created.
inline std::filesystem::path fresh_dir(const std::string& prefix, const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::filesystem::path p = std::filesystem::path(base ? base : "/tmp") / (prefix + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// The data-parallel tests' run: a width-4 ResNet on 101 synthetic 3x8x8 images (an odd
// count: the evaluation shards are padded) on the CPU, batch 8 per process, one epoch, a log
// line per step, into `dir`; `more` is appended (of a flag given twice, the last counts).
inline std::vector<std::string> tiny_cpu_run(const std::filesystem::path& dir, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"train", "--dataset", "synthetic", "--synthetic-size", "101x3x8x8", "--num-classes",
                                "4", "--width", "4", "--batch-size", "8", "--epochs", "1", "--workers", "0",
                                "--device", "cpu", "--seed", "3", "--print-freq", "1", "--output-dir", dir.string()};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Run {
  int status = -1;  // exit status, or 128 + signal
  std::string output;
  double seconds = 0;
};

// Starts ringtape with `args` (stdout and stderr together into `out_file`) in its own process
// group, without a launch environment of ours unless `env` gives one.
inline pid_t start(const std::vector<std::string>& args, const std::filesystem::path& out_file,
                   const std::vector<std::pair<std::string, std::string>>& env = {}) {
  const std::string bin = ringtape_binary();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setpgid(0, 0);
    const int fd = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                          "SLURM_PROCID", "SLURM_NTASKS"})
      unsetenv(v);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv = {const_cast<char*>("ringtape")};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

// Waits for `pid`, killing its process group after `limit` (a failure).
inline Run finish(pid_t pid, const std::filesystem::path& out_file, std::chrono::steady_clock::time_point t0,
                  std::chrono::seconds limit = std::chrono::seconds(60)) {
  Run r;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > limit) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL("ringtape still running after ", limit.count(), " s:\n", read_file(out_file));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.output = read_file(out_file);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// torchrun's environment for rank `rank` of `world` ranks on one node, the store at
// 127.0.0.1:`port` (for starting ranks by hand with start()).
inline std::vector<std::pair<std::string, std::string>> torchrun_env(int port, int rank, int world) {
  return {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}, {"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)}, {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)}};
}

// Runs ringtape to its end; `during(pid)` runs meanwhile in this thread (e.g. to kill a worker).
inline Run ringtape(const std::vector<std::string>& args, const std::filesystem::path& out_file,
                    std::chrono::seconds limit = std::chrono::seconds(60),
                    const std::function<void(pid_t)>& during = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = start(args, out_file);
  if (during) during(pid);
  return finish(pid, out_file, t0, limit);
}

// Every f32 tensor of a safetensors file, concatenated in name order.
inline std::vector<float> weights(const std::filesystem::path& file) {
  std::vector<float> all;
  for (const auto& [name, t] : load_safetensors(file.string())) {
    if (t.dtype() != DType::f32) continue;
    const std::vector<float> v = t.to_vector<float>();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

// Per tensor of two safetensors files (f32: weights and running statistics): max |a - b| over
// max |b|; the largest, and the tensor's name in `which`.
inline double worst_relative(const std::filesystem::path& a_file, const std::filesystem::path& b_file,
                             std::string& which) {
  const std::map<std::string, Tensor> a = load_safetensors(a_file.string()), b = load_safetensors(b_file.string());
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (const auto& [name, tb] : b) {
    if (tb.dtype() != DType::f32) continue;
    const std::vector<float> va = a.at(name).to_vector<float>(), vb = tb.to_vector<float>();
    double err = 0, scale = 0;
    for (size_t i = 0; i < vb.size(); ++i) {
      err = std::max(err, std::abs(double(va[i]) - double(vb[i])));
      scale = std::max(scale, std::abs(double(vb[i])));
    }
    const double r = scale > 0 ? err / scale : err;
    if (!(r <= worst)) worst = r, which = name;  // NaN wins
  }
  return worst;
}

}  // namespace rt::test
