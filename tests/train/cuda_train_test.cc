// The CUDA training path end to end through the `ringtape` binary, as a user runs it, against
// the same runs on the CPU:
//   - fp32 on --device cuda trains like --device cpu, NCHW and channels-last (weights and
//     running statistics after 3 steps);
//   - bf16 and fp16 (with loss scaling) on --device cuda: losses within their precision of
//     the CPU's fp32 run;
//   - --nproc-per-node 2 and 3 with --sync-bn on --device cuda train like one process, and
//     so do two nodes of 2 processes (two launchers);
//   - --comm-timeline and the overlap figure on the device's clock;
//   - --profile-steps on --device cuda: the GPU table and the kernels in trace.json.
// It runs where there is a GPU, and under --config=cuda-emu (tests/train/BUILD gives the
// emulated device count); elsewhere every case prints SKIPPED.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/io/json.h"
#include "kernels/cuda/runtime.h"
#include "distributed/net_util.h"
#include "tests/train/process_util.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
using test::ringtape;
using test::Run;
using test::worst_relative;

bool have_gpus(int n, const char* test) {
  std::string why;
  const int have = cuda::device_count(&why);
  if (have >= n) return true;
  std::printf("SKIPPED: %d CUDA device(s) needed, %d found (%s): %s\n", n, have, why.c_str(), test);
  return false;
}

fs::path tmpdir(const std::string& name) { return test::fresh_dir("cuda_train_test_", name); }

// A width-4 ResNet18 on 96 synthetic 3x16x16 images, batch 8, 3 steps without shuffling.
// Seed 6: kink-free (docs/numerics.md), as seeds 7 and 8 are; with seed 5 a ReLU input near
// 0 lands on the other side on the GPU in the third step and channels-last
// layer1.0.bn1.bias moves by 2.4e-2 (CPU NCHW against NHWC: 5e-5), found when this test
// first ran under --config=cuda-emu.
std::vector<std::string> tiny(const fs::path& dir, const std::string& device, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"train", "--dataset", "synthetic", "--synthetic-size", "96x3x16x16", "--num-classes",
                                "4", "--width", "4", "--batch-size", "8", "--epochs", "1", "--steps", "3",
                                "--no-shuffle", "--workers", "0", "--device", device, "--seed", "6",
                                "--print-freq", "1", "--output-dir", dir.string()};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// Runs to the end (status 0 required) and returns the run's directory.
fs::path train(const fs::path& base, const std::string& name, const std::vector<std::string>& args) {
  const Run r = ringtape(args, base / (name + ".txt"), std::chrono::seconds(600));
  INFO(r.output);
  REQUIRE(r.status == 0);
  return base / name;
}

std::vector<double> losses(const fs::path& run) {
  std::vector<double> out;
  std::istringstream lines(test::read_file(run / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const json::Value v = json::parse(line);
    if (v.find("type")->as_string() == "train") out.push_back(v.find("loss")->as_double());
  }
  return out;
}

// fp32, 3 steps at lr 0.1 from the same weights on the same batches: the GPU's convolutions
// (cuDNN; under the emulator a direct convolution accumulating in double) and batch-norm
// sums (f32 on the GPU, f64 on the CPU) round differently from the CPU's, and the steps
// amplify it, as the CPU's own NCHW against channels-last does (5e-5 of a tensor's largest
// value here). Measured under the emulator: 3.0e-5 (NCHW), 3.3e-5 (channels-last); losses
// within 5e-6. Bounds: 1e-4 of each tensor's largest value, losses 2e-5.
TEST_CASE("fp32 on --device cuda trains like --device cpu, NCHW and channels-last") {
  if (!have_gpus(1, "fp32 cuda vs cpu")) return;
  const fs::path base = tmpdir("fp32");
  for (const std::string fmt : {"contiguous", "channels_last"}) {
    CAPTURE(fmt);
    const fs::path cpu = train(base, "cpu_" + fmt, tiny(base / ("cpu_" + fmt), "cpu", {"--memory-format", fmt}));
    const fs::path gpu = train(base, "cuda_" + fmt,
                               tiny(base / ("cuda_" + fmt), "cuda", {"--memory-format", fmt, "--precision", "fp32"}));
    std::string which;
    const double d = worst_relative(gpu / "model.safetensors", cpu / "model.safetensors", which);
    MESSAGE(fmt, ": cuda vs cpu weights differ by ", d, " of the largest value (", which, ")");
    CHECK_MESSAGE(d <= 1e-4, fmt, ": ", which, " differs by ", d);
    const std::vector<double> lg = losses(gpu), lc = losses(cpu);
    REQUIRE(lg.size() == 3);
    REQUIRE(lc.size() == 3);
    for (size_t i = 0; i < lg.size(); ++i) CHECK(lg[i] == doctest::Approx(lc[i]).epsilon(2e-5));
  }
}

// The recipes' pieces through the trainer on the GPU's kernels: random erasing, mixup or
// cutmix and the soft-target loss with label smoothing, gradient clipping, the EMA (every
// step), and LARS, each against the same run on the CPU (the same draws: they are made on the
// host). Bounds as the fp32 case above (1e-4 of each tensor's largest value); LARS's norms
// are also summed in another order on the GPU (optim/optimizer.h). Measured under the
// emulator: 2.9e-5 (model), 1.8e-5 (EMA), 3.0e-5 (LARS at lr 0.1). LARS at lr 1.0 gave 9.2e-4
// (layer2.1.bn1.bias): its excluded batch-norm parameters take plain momentum steps at the
// full lr, which amplify the first rounding differences as any lr-1.0 SGD would.
TEST_CASE("the recipes' pieces on --device cuda train like --device cpu (fp32)") {
  if (!have_gpus(1, "recipe pieces cuda vs cpu")) return;
  const fs::path base = tmpdir("recipe");
  const std::vector<std::vector<std::string>> runs = {
      {"--mixup-alpha", "0.2", "--cutmix-alpha", "1.0", "--random-erase", "0.5", "--label-smoothing", "0.1",
       "--model-ema", "--model-ema-steps", "1", "--clip-grad-norm", "0.5", "--norm-weight-decay", "0"},
      {"--optimizer", "lars", "--lr", "0.1", "--weight-decay", "5e-5", "--mixup-alpha", "0.2"}};
  for (size_t r = 0; r < runs.size(); ++r) {
    CAPTURE(r);
    const std::string n = std::to_string(r);
    std::vector<std::string> on_gpu = runs[r];
    on_gpu.insert(on_gpu.end(), {"--precision", "fp32"});
    const fs::path cpu = train(base, "cpu" + n, tiny(base / ("cpu" + n), "cpu", runs[r]));
    const fs::path gpu = train(base, "cuda" + n, tiny(base / ("cuda" + n), "cuda", on_gpu));
    std::vector<std::string> files = {"model.safetensors"};
    if (r == 0) files.push_back("model_ema.safetensors");
    for (const std::string& f : files) {
      std::string which;
      const double d = worst_relative(gpu / f, cpu / f, which);
      MESSAGE(f, " run ", r, ": cuda vs cpu differ by ", d, " of the largest value (", which, ")");
      CHECK_MESSAGE(d <= 1e-4, f, ": ", which, " differs by ", d);
    }
    const std::vector<double> lg = losses(gpu), lc = losses(cpu);
    REQUIRE(lg.size() == 3);
    REQUIRE(lc.size() == 3);
    for (size_t i = 0; i < lg.size(); ++i) CHECK(lg[i] == doctest::Approx(lc[i]).epsilon(2e-5));
  }
}

// At lr 0.001, against the CPU's fp32 run:
//   bf16 keeps 8 significant bits: the first loss (the forward pass alone) within 2e-2, every
//   step within 5e-2 (precision_cuda_test's bound; measured 0.60%, 1.3%, 0.74%). At lr 0.01
//   this width-4 net is not well conditioned for it (docs/numerics.md): two bf16 runs that
//   differ only in one rounding per element of the downsample's batch norm (its output added
//   unrounded, Note [Two batch norms in one tail] in engine/ops/dual_batch_norm_add_relu.cc)
//   were 5.0% and 7.6% from fp32 at the second step, 0.7% and 11% at the third;
//   fp16 keeps 11: the first loss within 2e-3 (measured 2.3e-4). Its later steps are not the
//   CPU's: the loss scale starts at 65536 and the first steps' gradients overflow, so they
//   are skipped while the scale halves (PyTorch's GradScaler does the same; here 2 of 3): the
//   run must say so, end finite, and keep the scaler's state in its checkpoint.
TEST_CASE("bf16 and fp16 (loss scaling) on --device cuda: losses within their precision of the CPU's fp32") {
  if (!have_gpus(1, "bf16/fp16 cuda vs cpu")) return;
  const fs::path base = tmpdir("half");
  for (const std::string fmt : {"contiguous", "channels_last"}) {
    CAPTURE(fmt);
    const std::vector<std::string> common = {"--memory-format", fmt, "--lr", "0.001"};
    const std::vector<double> ref = losses(train(base, "cpu_" + fmt, tiny(base / ("cpu_" + fmt), "cpu", common)));
    REQUIRE(ref.size() == 3);
    for (const std::string precision : {"bf16", "fp16"}) {
      CAPTURE(precision);
      const std::string name = precision + "_" + fmt;
      std::vector<std::string> more = common;
      more.insert(more.end(), {"--precision", precision});
      const fs::path run = train(base, name, tiny(base / name, "cuda", more));
      const std::vector<double> l = losses(run);
      REQUIRE(l.size() == ref.size());
      for (size_t i = 0; i < l.size(); ++i) {
        MESSAGE(name, " step ", i + 1, ": loss ", l[i], ", CPU fp32 ", ref[i]);
        CHECK(std::isfinite(l[i]));
      }
      if (precision == "bf16") {
        CHECK(l[0] == doctest::Approx(ref[0]).epsilon(2e-2));
        for (size_t i = 0; i < l.size(); ++i) CHECK(l[i] == doctest::Approx(ref[i]).epsilon(5e-2));
      } else {
        CHECK(l[0] == doctest::Approx(ref[0]).epsilon(2e-3));
        CHECK(test::read_file(base / (name + ".txt")).find("step(s) skipped on inf/NaN gradients") != std::string::npos);
      }
      const std::string ckpt = test::read_file(run / "checkpoint.safetensors");
      CHECK((ckpt.find("grad_scaler.scale") != std::string::npos) == (precision == "fp16"));
    }
  }
}

// As data_parallel_test's CPU case (the sampler's split, the bound and why): N ranks of batch 8
// with --sync-bn against one process of batch 8N, each on its own GPU (rank r: cuda:r).
TEST_CASE("--nproc-per-node 2 and 3 with --sync-bn on --device cuda train like one process") {
  if (!have_gpus(3, "--sync-bn on cuda")) return;
  const fs::path base = tmpdir("sync_bn");
  for (int n : {2, 3}) {
    // --batch-size is per process: 8 on each of N ranks, 8N on the one.
    const std::string N = std::to_string(n), B = std::to_string(8 * n);
    const fs::path one =
        train(base, "one" + N, tiny(base / ("one" + N), "cuda", {"--batch-size", B, "--precision", "fp32"}));
    const fs::path many = train(base, "sync" + N,
                                tiny(base / ("sync" + N), "cuda", {"--nproc-per-node", N, "--sync-bn", "--precision", "fp32"}));
    std::string which;
    const double d = worst_relative(many / "model.safetensors", one / "model.safetensors", which);
    MESSAGE(n, " processes with --sync-bn on cuda vs one: ", d, " (", which, ")");
    CHECK_MESSAGE(d <= 1e-4, n, " processes: ", which, " differs by ", d, " of its largest value");
  }
}

// Issue 21, deliverable 4 (Note [Two clocks], distributed/reducer.h): --comm-timeline and the
// overlap figure on GPUs, on the device's clock. Before, a bucket's completion was unknown on
// CUDA: the file's buckets said completed -1 and the run printed no "all-reduce: ... hidden
// behind backward" line. A 1 KiB bucket cap: a bucket or so per parameter.
TEST_CASE("--comm-timeline on --device cuda: device times per bucket, the overlap figure printed") {
  if (!have_gpus(2, "--comm-timeline on cuda")) return;
  const fs::path base = tmpdir("timeline");
  const fs::path run = train(base, "run", tiny(base / "run", "cuda", {"--nproc-per-node", "2", "--precision", "fp32",
                                                                     "--bucket-cap-mb", "0.001", "--comm-timeline"}));
  const std::string out = test::read_file(base / "run.txt");
  CHECK(out.find("% hidden behind backward (3 steps)") != std::string::npos);
  std::istringstream lines(test::read_file(run / "timeline.jsonl"));
  int steps = 0;
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    const json::Value v = json::parse(line);
    ++steps;
    CHECK(v.find("step")->as_int() == steps);
    CHECK(v.find("backend")->as_string() == "nccl");
    CHECK(v.find("clock")->as_string() == "device");
    CHECK(v.find("before_backward_s")->is_null() == (steps == 1));
    const double backward_end = v.find("backward_end_s")->as_double(), wait_end = v.find("wait_end_s")->as_double();
    const json::Array& buckets = v.find("buckets")->as_array();
    REQUIRE(buckets.size() > 2);
    double last_end = 0;
    for (const json::Value& b : buckets) {
      const double ready = b.find("ready")->as_double(), launched = b.find("launched")->as_double(),
                   completed = b.find("completed")->as_double();
      CHECK(0 <= ready);
      CHECK(ready <= launched);
      CHECK(last_end <= launched);  // one communication stream: in order
      CHECK(launched <= completed);
      CHECK(completed <= wait_end);
      last_end = completed;
    }
    // The first bucket (the classifier's) is reduced while backward's kernels still run.
    CHECK(buckets[0].find("launched")->as_double() < backward_end);
  }
  CHECK(steps == 3);
}

// Issue 21, deliverable 7: two launchers as two nodes of one machine (--nnodes 2, 2 processes
// each, the node's GPUs set apart with CUDA_VISIBLE_DEVICES as two machines' would be) train
// like one process with the global batch of 32 (--sync-bn; bound and why as above).
TEST_CASE("two nodes of 2 processes on --device cuda train like one process with the global batch") {
  if (!have_gpus(4, "two nodes on cuda")) return;
  const fs::path base = tmpdir("nodes");
  const fs::path one = train(base, "one", tiny(base / "one", "cuda", {"--batch-size", "32", "--precision", "fp32"}));
  const std::string port = std::to_string(dist::net::local_port(dist::net::listen_tcp("127.0.0.1", 0).get()));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int node = 0; node < 2; ++node)
    pids.push_back(test::start(tiny(base / "two", "cuda", {"--nproc-per-node", "2", "--nnodes", "2", "--node-rank",
                                                          std::to_string(node), "--master-addr", "127.0.0.1",
                                                          "--master-port", port, "--timeout", "120", "--sync-bn",
                                                          "--precision", "fp32"}),
                               base / ("node" + std::to_string(node) + ".txt"),
                               {{"CUDA_VISIBLE_DEVICES", node == 0 ? "0,1" : "2,3"}}));
  const Run n0 = test::finish(pids[0], base / "node0.txt", t0, std::chrono::seconds(600));
  const Run n1 = test::finish(pids[1], base / "node1.txt", t0, std::chrono::seconds(600));
  INFO(n0.output);
  INFO(n1.output);
  REQUIRE(n0.status == 0);
  REQUIRE(n1.status == 0);
  CHECK(n0.output.find("global batch 32 = 4 process(es) x batch 8") != std::string::npos);
  std::string which;
  const double d = worst_relative(base / "two" / "model.safetensors", one / "model.safetensors", which);
  MESSAGE("2 nodes x 2 processes x batch 8 on cuda vs 1 x 32: ", d, " (", which, ")");
  CHECK_MESSAGE(d <= 1e-4, which, " differs by ", d, " of its largest value");
}

#if RINGTAPE_CUDA_EMU
// Each rank's work on its own GPU only (a context is what a process holds on a device,
// hundreds of MB of its memory on a GPU, and what exclusive-process compute mode refuses a
// second process: the emulator's Note [Contexts]). Before the fix, rank 1 also had one on
// cuda:0: the communicator's device guard restored device 0 after its setup, and threads that
// never chose a device (the NCCL watchdog, the loader's workers with their pinned buffers) are
// on device 0 by default.
TEST_CASE("--nproc-per-node 2 on --device cuda: each rank holds a context on its own GPU only") {
  const fs::path base = tmpdir("contexts");
  const fs::path report = base / "contexts.txt";
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = test::start(tiny(base / "run", "cuda", {"--nproc-per-node", "2", "--precision", "fp32"}),
                                base / "run.txt", {{"RINGTAPE_EMU_CONTEXTS", report.string()}});
  const Run r = test::finish(pid, base / "run.txt", t0, std::chrono::seconds(600));
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::map<std::string, std::string> by_rank;  // "0" -> " cuda:0"
  std::istringstream lines(test::read_file(report));
  for (std::string line; std::getline(lines, line);) {
    const size_t c = line.find(" contexts:");
    REQUIRE(line.rfind("rank ", 0) == 0);
    REQUIRE(c != std::string::npos);
    by_rank[line.substr(5, line.find(' ', 5) - 5)] = line.substr(c + 10);
  }
  INFO(test::read_file(report));
  CHECK(by_rank.count("-") == 1);  // the launcher
  CHECK(by_rank["-"] == "");       // which touches no GPU
  CHECK(by_rank["0"] == " cuda:0");
  CHECK(by_rank["1"] == " cuda:1");
}

// A scheduler that binds each task to its own GPU (srun --gpus-per-task=1) leaves one visible
// device to each process: LOCAL_RANK 1 then has no cuda:1. The rank uses LOCAL_RANK modulo
// the visible count, says so, and trains as two ranks on two devices of one process's view
// do. Before the fix rank 1 asked for cuda:1 and failed ("cudaSetDevice(device) failed:
// cudaErrorInvalidDevice"), and rank 0 waited out the rendezvous.
TEST_CASE("per-task GPU binding (one visible device per rank): local rank 1 uses cuda:0 and says so") {
  const fs::path base = tmpdir("per_task");
  const fs::path both = train(base, "both", tiny(base / "both", "cuda", {"--nproc-per-node", "2", "--precision", "fp32"}));
  const int port = dist::net::local_port(dist::net::listen_tcp("127.0.0.1", 0).get());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    auto env = test::torchrun_env(port, r, 2);
    env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(r));
    pids.push_back(test::start(tiny(base / "bound", "cuda", {"--precision", "fp32", "--timeout", "60"}),
                               base / ("rank" + std::to_string(r) + ".txt"), env));
  }
  const Run r0 = test::finish(pids[0], base / "rank0.txt", t0, std::chrono::seconds(600));
  const Run r1 = test::finish(pids[1], base / "rank1.txt", t0, std::chrono::seconds(600));
  INFO(r0.output);
  INFO(r1.output);
  REQUIRE(r0.status == 0);
  REQUIRE(r1.status == 0);
  CHECK(r1.output.find("1 CUDA device visible to this process for 2 local ranks") != std::string::npos);
  CHECK(r1.output.find("local rank 1 uses cuda:0") != std::string::npos);
  std::string which;
  const double d = worst_relative(base / "bound" / "model.safetensors", both / "model.safetensors", which);
  CHECK_MESSAGE(d == 0.0, which, " differs by ", d, " of its largest value");
}
#endif

TEST_CASE("--profile-steps on --device cuda: the GPU table, kernels and streams in trace.json") {
  if (!have_gpus(1, "--profile-steps on cuda")) return;
  const fs::path base = tmpdir("profile");
  const fs::path run = train(base, "run", tiny(base / "run", "cuda", {"--profile-steps", "2:4", "--profile-group", "kernel",
                                                                     "--precision", "fp32"}));
  const std::string out = test::read_file(base / "run.txt");
  CHECK(out.find("profile of steps 2-3 on cuda:0") != std::string::npos);
  const json::Value prof = json::parse(test::read_file(run / "profile.json"));
  CHECK(prof.find("totals")->find("steps")->as_int() == 2);
  CHECK(!prof.find("by_op")->as_array().empty());
  const std::string trace = test::read_file(run / "trace.json");
  CHECK(json::parse(trace).find("traceEvents")->as_array().size() > 100);
  // Kernels from the CUDA activity records (CUPTI), on their stream's track: batch norm's
  // reduction is in every step.
  CHECK(trace.find("channel_partials") != std::string::npos);
  CHECK(trace.find("stream") != std::string::npos);
}

}  // namespace
}  // namespace rt
