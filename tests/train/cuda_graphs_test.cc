// `ringtape train --cuda-graphs` on the CUDA path (Note [The training step as a CUDA graph] in
// train/step.cc), against the same runs without it:
//   - bit for bit the same weights, running statistics, optimizer state and losses, through
//     the rehearsals, the capture and replays (fp32, bf16, and fp16 with its loss scaler),
//     with a step schedule and with cosine after a
//     warm-up (the lr changes every step, read from device memory: one capture), SGD, LARS
//     and AdamW (with fp16's loss scaler too);
//   - an exact resume of a run with graphs (SGD, AdamW, SGD and AdamW with fp16's loss scaler);
//   - data parallelism over NCCL (2 processes, with and without --sync-bn, fp16 too): the
//     collectives captured, bit for bit the eager data-parallel run;
//   - a configuration that cannot be captured runs eagerly and says which flag prevents it.
// It runs where there is a GPU, and under --config=cuda-emu; elsewhere every case prints SKIPPED.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"
#include "kernels/cuda/runtime.h"
#include "tests/train/process_util.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
using test::ringtape;
using test::Run;

bool have_gpu(const char* test) {
  std::string why;
  if (cuda::device_count(&why) > 0) return true;
  std::printf("SKIPPED: no CUDA device (%s): %s\n", why.c_str(), test);
  return false;
}

// A width-4 ResNet18 on 40 synthetic 3x16x16 images, batch 8 (5 steps an epoch), 2 epochs
// without shuffling, SGD with momentum at lr 0.1, then 0.01 in the second epoch.
std::vector<std::string> tiny(const fs::path& dir, std::vector<std::string> more = {},
                              const std::string& precision = "fp32") {
  std::vector<std::string> a = {"train", "--dataset", "synthetic", "--synthetic-size", "40x3x16x16", "--num-classes",
                                "4", "--width", "4", "--batch-size", "8", "--epochs", "2", "--no-shuffle",
                                "--workers", "0", "--device", "cuda", "--seed", "6", "--precision", precision,
                                "--lr-scheduler", "step", "--lr-step-size", "1", "--lr-gamma", "0.1",
                                "--print-freq", "1", "--output-dir", dir.string()};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

Run train(const fs::path& dir, const std::vector<std::string>& args) {
  const Run r = ringtape(args, dir.string() + ".txt", std::chrono::seconds(1200));
  INFO(r.output);
  REQUIRE(r.status == 0);
  return r;
}

// Every tensor of the two files (model, optimizer state, running statistics) with the same
// bytes; returns how many were compared.
size_t check_identical(const fs::path& a_file, const fs::path& b_file) {
  const std::map<std::string, Tensor> a = load_safetensors(a_file.string()), b = load_safetensors(b_file.string());
  REQUIRE(a.size() == b.size());
  for (const auto& [name, tb] : b) {
    CAPTURE(name);
    REQUIRE(a.count(name));
    const Tensor& ta = a.at(name);
    REQUIRE(ta.dtype() == tb.dtype());
    REQUIRE(ta.shape() == tb.shape());
    CHECK(std::memcmp(ta.raw_data(), tb.raw_data(), tb.nbytes()) == 0);
  }
  return b.size();
}

// The printed losses, line for line (evaluations included).
std::string losses(const std::string& out) {
  std::string r;
  for (size_t i = out.find("loss "); i != std::string::npos; i = out.find("loss ", i + 1))
    r += out.substr(i, out.find(' ', i + 5) - i) + "\n";
  return r;
}

// The loss scaler's part of each log line: "loss scale S (N step(s) skipped on inf/NaN gradients)".
std::string loss_scales(const std::string& out) {
  std::string r;
  for (size_t i = out.find("loss scale "); i != std::string::npos; i = out.find("loss scale ", i + 1))
    r += out.substr(i, out.find("gradients)", i) - i) + "\n";
  return r;
}

TEST_CASE("--cuda-graphs trains bit for bit as without, across a capture, replays and an lr change") {
  if (!have_gpu("cuda graphs vs eager")) return;
  // bf16: mixed precision's compute copies, refreshed in the graph and by the evaluation
  // between the epochs (Note [The training step as a CUDA graph]). fp16: the loss scaler in
  // the graph (Note [Loss scaling in a captured step] in optim/grad_scaler.cc); its first
  // steps overflow and are skipped while the scale halves, so the capture waits for a
  // rehearsal that stepped.
  for (const std::string prec : {"fp32", "bf16", "fp16"}) {
    CAPTURE(prec);
    const fs::path base = test::fresh_dir("cuda_graphs_test_", "same_" + prec);
    const Run e = train(base / "eager", tiny(base / "eager", {}, prec));
    const Run g = train(base / "graphs", tiny(base / "graphs", {"--cuda-graphs"}, prec));
    CHECK(g.output.find("runs eagerly") == std::string::npos);
    const size_t n =
        check_identical(base / "graphs" / "checkpoint.safetensors", base / "eager" / "checkpoint.safetensors");
    MESSAGE(prec, ": checkpoint tensors compared bit for bit: ", n);
    CHECK(n > 60);  // weights, momentum buffers, running statistics
    check_identical(base / "graphs" / "model.safetensors", base / "eager" / "model.safetensors");
    CHECK(test::read_file(base / "graphs" / "metrics.jsonl").size() > 0);
    // The evaluations between epochs too.
    CHECK(losses(g.output) == losses(e.output));
    if (prec == "fp16") {
      const std::string scales = loss_scales(g.output);
      MESSAGE("fp16 with graphs, per log line:\n", scales);
      CHECK(scales == loss_scales(e.output));
      CHECK(scales.find("(0 step(s)") != std::string::npos);
      CHECK(scales.find("(1 step(s)") != std::string::npos);  // the first steps overflow
      const size_t at = g.output.find("--cuda-graphs: ");
      REQUIRE(at != std::string::npos);
      const std::string summary = g.output.substr(at, g.output.find('\n', at) - at);
      MESSAGE(summary);  // the first steps eager (overflowing, then a rehearsal that stepped), then replays
      CHECK(summary.find(" 1 captured, ") != std::string::npos);
      CHECK(summary.find(": 0 steps replayed") == std::string::npos);
    }
  }
}

TEST_CASE("--cuda-graphs with an lr that changes every step captures once and trains bit for bit as without") {
  if (!have_gpu("cuda graphs with cosine")) return;
  // Note [The learning rate in device memory] in optim/optimizer.h: a warm-up epoch, then
  // cosine; SGD (the test's default), LARS, and AdamW, whose bias corrections change every
  // step too (Note [AdamW's scalars in device memory] in optim/adamw.cc), also with fp16's
  // loss scaler (Note [AdamW's skipped steps in a captured step]).
  for (const std::string run : {"sgd", "lars", "adamw", "adamw_fp16"}) {
    CAPTURE(run);
    const std::string opt = run.substr(0, run.find('_'));
    const std::string precision = run == "adamw_fp16" ? "fp16" : "fp32";
    const fs::path base = test::fresh_dir("cuda_graphs_test_", "cosine_" + run);
    std::vector<std::string> more = {"--lr-scheduler", "cosine", "--lr-warmup-epochs", "1", "--optimizer", opt};
    if (opt == "adamw") more.insert(more.end(), {"--lr", "0.001"});
    std::vector<std::string> with = more;
    with.push_back("--cuda-graphs");
    const Run e = train(base / "eager", tiny(base / "eager", more, precision));
    const Run g = train(base / "graphs", tiny(base / "graphs", with, precision));
    CHECK(g.output.find("runs eagerly") == std::string::npos);
    // 10 steps: the warm-up step and rehearsals eager, one capture, the rest replayed.
    CHECK(g.output.find(" captured, ") != std::string::npos);
    CHECK(g.output.find(" 1 captured, ") != std::string::npos);
    check_identical(base / "graphs" / "checkpoint.safetensors", base / "eager" / "checkpoint.safetensors");
    check_identical(base / "graphs" / "model.safetensors", base / "eager" / "model.safetensors");
    CHECK(losses(g.output) == losses(e.output));
    CHECK(losses(g.output).size() > 0);
  }
}

TEST_CASE("--cuda-graphs resumes exactly") {
  if (!have_gpu("cuda graphs resume")) return;
  // AdamW: its step counts advance on the host after every replay, and are saved. fp16: the
  // loss scaler's state, read from device memory into the checkpoint and written back.
  for (const std::string run : {"sgd", "adamw", "sgd_fp16", "adamw_fp16"}) {
    CAPTURE(run);
    const std::string opt = run.substr(0, run.find('_'));
    const std::string precision = run.find("_fp16") != std::string::npos ? "fp16" : "fp32";
    const fs::path base = test::fresh_dir("cuda_graphs_test_", "resume_" + run);
    const std::vector<std::string> o = {"--cuda-graphs", "--optimizer", opt, "--lr", opt == "adamw" ? "0.001" : "0.1"};
    auto with = [&](std::vector<std::string> more) {
      more.insert(more.begin(), o.begin(), o.end());
      return more;
    };
    train(base / "whole", tiny(base / "whole", with({}), precision));
    train(base / "part", tiny(base / "part", with({"--steps", "7"}), precision));
    train(base / "part",
          tiny(base / "part", with({"--resume", (base / "part" / "checkpoint.safetensors").string()}), precision));
    const size_t n =
        check_identical(base / "part" / "checkpoint.safetensors", base / "whole" / "checkpoint.safetensors");
    if (precision == "fp16") CHECK(load_safetensors((base / "part" / "checkpoint.safetensors").string()).count(
                                       "grad_scaler.scale") == 1);
    CHECK(n > 60);
  }
}

TEST_CASE("--cuda-graphs over NCCL (2 processes) captures the all-reduces and trains bit for bit as without") {
  if (!have_gpu("cuda graphs with data parallelism")) return;
  // Note [Data parallel in a CUDA graph] in train/data_parallel.cc: the reducer's bucketed
  // all-reduces (small buckets: several per step) and --sync-bn's all-gathers in the graph;
  // fp16: the loss scaler's finding on the all-reduced gradients, the same on every rank.
  for (const std::string run : {"plain", "sync_bn", "sync_bn_fp16"}) {
    CAPTURE(run);
    const fs::path base = test::fresh_dir("cuda_graphs_test_", "dp_" + run);
    // 20 images a rank, 2 steps an epoch: 4 epochs to replay after the warm-up, rehearsals and capture.
    std::vector<std::string> more = {"--nproc-per-node", "2", "--bucket-cap-mb", "0.002", "--epochs", "4"};
    if (run != "plain") more.push_back("--sync-bn");
    const std::string precision = run == "sync_bn_fp16" ? "fp16" : "fp32";
    std::vector<std::string> with = more;
    with.push_back("--cuda-graphs");
    const Run e = train(base / "eager", tiny(base / "eager", more, precision));
    const Run g = train(base / "graphs", tiny(base / "graphs", with, precision));
    CHECK(g.output.find("runs eagerly") == std::string::npos);
    const size_t at = g.output.find("--cuda-graphs: ");
    REQUIRE(at != std::string::npos);
    const std::string summary = g.output.substr(at, g.output.find('\n', at) - at);
    MESSAGE(summary);
    CHECK(summary.find(" 1 captured, ") != std::string::npos);
    CHECK(summary.find(": 0 steps replayed") == std::string::npos);
    const size_t n =
        check_identical(base / "graphs" / "checkpoint.safetensors", base / "eager" / "checkpoint.safetensors");
    CHECK(n > 60);
    CHECK(losses(g.output) == losses(e.output));
    CHECK(losses(g.output).size() > 0);
  }
}

TEST_CASE("--cuda-graphs with a setting that cannot be captured runs eagerly and names the setting") {
  if (!have_gpu("cuda graphs fallback")) return;
  const fs::path base = test::fresh_dir("cuda_graphs_test_", "fallback");
  const Run r = train(base / "accum", tiny(base / "accum", {"--cuda-graphs", "--accum-steps", "2", "--steps", "1",
                                                             "--batch-size", "4"}));
  CHECK(r.output.find("--cuda-graphs: the training step runs eagerly because of --accum-steps 2 (use 1)") !=
        std::string::npos);
  const Run h = train(base / "mixup", tiny(base / "mixup", {"--cuda-graphs", "--steps", "1", "--mixup-alpha", "0.2"}));
  CHECK(h.output.find("because of --mixup-alpha (host-drawn mixing weights; use 0)") != std::string::npos);
  const Run t = train(base / "timeline", tiny(base / "timeline", {"--cuda-graphs", "--steps", "1", "--nproc-per-node",
                                                                   "2", "--comm-timeline"}));
  CHECK(t.output.find("because of --comm-timeline") != std::string::npos);
}

}  // namespace
}  // namespace rt
