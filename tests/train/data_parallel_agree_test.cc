// What the ranks of a data-parallel run must decide together, through the `ringtape` binary
// on CPU processes (Gloo, 127.0.0.1, each run bounded in time):
//   - --skip-nonfinite: a NaN in one rank's shard skips the step on every rank at once
//     (Note [Skipping together], train/step.cc), and the run trains like one process with
//     the global batch; before, that rank skipped alone and the others waited in the
//     gradient all-reduce until --timeout;
//   - the logged loss is the mean over every rank (Note [Logged loss], train/trainer.cc);
//   - resuming with another number of ranks recounts the steps, so the schedule keeps its
//     epochs and the run trains to its last epoch (Note [Resume with another world size]);
//   - the checkpoint records the CPU threads used, not --threads 0.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "tests/train/process_util.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
using test::ringtape;
using test::Run;
using test::worst_relative;

fs::path tmpdir(const std::string& name) { return test::fresh_dir("data_parallel_agree_test_", name); }

// 12 f32 images 1x8x8 with labels 0..3 (a "tensors" dataset); one pixel of image `nan_image`
// is NaN (none when -1).
fs::path tensors_dataset(const fs::path& dir, int nan_image) {
  std::vector<float> px(12 * 64);
  for (size_t i = 0; i < px.size(); ++i) px[i] = float(std::sin(double(i) * 0.37));
  if (nan_image >= 0) px[size_t(nan_image) * 64 + 5] = std::nanf("");
  std::vector<int64_t> labels(12);
  for (int i = 0; i < 12; ++i) labels[size_t(i)] = i % 4;
  const fs::path path = dir / "data.safetensors";
  save_safetensors(path.string(), {{"images", Tensor::from_vector(px, {12, 1, 8, 8})},
                                   {"labels", Tensor::from_vector(labels, {12})}},
                   {});
  return path;
}

std::vector<std::string> small(const fs::path& data, const fs::path& out, std::vector<std::string> more) {
  std::vector<std::string> a = {"train", "--dataset", "tensors", "--data-path", data.string(), "--no-shuffle",
                                "--num-classes", "4", "--width", "4", "--epochs", "2", "--print-freq", "1",
                                "--workers", "0", "--lr", "0.05", "--device", "cpu", "--seed", "3", "--output-dir",
                                out.string()};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// The "loss" of metrics.jsonl's train record of `step`.
double logged_loss(const fs::path& run_dir, int64_t step) {
  std::istringstream in(test::read_file(run_dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const json::Value v = json::parse(line);
    if (v.find("type")->as_string() == "train" && v.find("step")->as_int() == step) return v.find("loss")->as_double();
  }
  FAIL("no train record of step ", step, " in ", (run_dir / "metrics.jsonl").string());
  return 0;
}

// Without shuffling, 2 ranks x batch 3 see positions {6j..6j+5} at step j+1 (rank r the
// positions r, r + 2, ...): the one process's batch of 6. Image 7 is rank 1's, in step 2 of
// each of the 2 epochs. Rank 0's own batches are finite: it skips because rank 1 must.
// With --sync-bn the two runs compute the same steps (bound as in data_parallel_test's
// --sync-bn case: fp32 rounds differently on the two sides); there rank 0's loss is NaN too
// (the batch statistics are shared).
TEST_CASE("--skip-nonfinite: a NaN in one rank's batch skips the step on every rank; the logged loss is global") {
  const fs::path base = tmpdir("skip");
  const fs::path data = tensors_dataset(base, 7);
  auto two_ranks = [&](const std::string& name, std::vector<std::string> more) {
    std::vector<std::string> args = small(data, base / name, more);
    for (const char* a : {"--skip-nonfinite", "--nproc-per-node", "2", "--batch-size", "3", "--timeout", "20"})
      args.push_back(a);
    return ringtape(args, base / (name + ".txt"));
  };
  const Run two = two_ranks("two", {});
  INFO(two.output);
  REQUIRE(two.status == 0);  // before: exit 1 after the 20 s timeout ("some rank did not take part")
  CHECK(two.seconds < 20);
  CHECK(two.output.find("the logged loss is the mean over every process") != std::string::npos);
  const std::string rank0 = test::read_file(base / "two" / "logs" / "rank-0.log"),
                    rank1 = test::read_file(base / "two" / "logs" / "rank-1.log");
  for (const char* step : {"step 2 skipped", "step 4 skipped"}) {
    CHECK_MESSAGE(rank1.find(step) != std::string::npos, rank1);
    CHECK_MESSAGE(rank0.find(step) != std::string::npos, rank0);
  }
  for (const char* step : {"step 1 skipped", "step 3 skipped"}) CHECK(rank0.find(step) == std::string::npos);
  CHECK(rank1.find("loss nan: the input batch holds NaN or Inf") != std::string::npos);
  CHECK(rank0.find("rank 1 found NaN or Inf (its log says where); every rank skips the step") != std::string::npos);

  const Run sync = two_ranks("sync", {"--sync-bn"});
  std::vector<std::string> one_args = small(data, base / "one", {"--skip-nonfinite", "--sync-bn"});
  for (const char* a : {"--batch-size", "6"}) one_args.push_back(a);
  const Run one = ringtape(one_args, base / "one.txt");
  INFO(sync.output);
  INFO(one.output);
  REQUIRE(sync.status == 0);
  REQUIRE(one.status == 0);
  for (const char* step : {"step 2 skipped", "step 4 skipped"}) {
    CHECK(one.output.find(step) != std::string::npos);
    CHECK(sync.output.find(step) != std::string::npos);
  }
  std::string which;
  const double d = worst_relative(base / "sync" / "model.safetensors", base / "one" / "model.safetensors", which);
  MESSAGE("2 ranks x 3 vs 1 x 6, --skip-nonfinite --sync-bn: ", d, " (", which, ")");
  CHECK_MESSAGE(d <= 1e-4, which, " differs by ", d, " of its largest value");
  // The logged loss of step 1 is the global batch's (before: rank 0's 3 images').
  const double l2 = logged_loss(base / "sync", 1), l1 = logged_loss(base / "one", 1);
  CHECK_MESSAGE(std::abs(l2 - l1) <= 1e-5 * std::abs(l1), "step 1's loss: 2 ranks ", l2, ", one process ", l1);
}

// 101 synthetic 8x8 images, batch 8: 2 ranks take 6 steps per epoch, 1 rank 12, 3 ranks 4.
std::vector<std::string> synthetic(const fs::path& out, std::vector<std::string> more) {
  std::vector<std::string> a = {"train", "--dataset", "synthetic", "--synthetic-size", "101x3x8x8", "--num-classes",
                                "4", "--width", "4", "--batch-size", "8", "--epochs", "3", "--workers", "0",
                                "--device", "cpu", "--seed", "3", "--print-freq", "1", "--output-dir", out.string()};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

struct Logged {
  int64_t step, of;
  double lr;
};
// The "epoch E step S/M  loss L  lr X" lines of a run's output, in order.
std::vector<Logged> logged_steps(const std::string& output) {
  static const std::regex line(R"(step (\d+)/(\d+)  loss \S+  lr ([0-9.]+))");
  std::vector<Logged> out;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line); it != std::sregex_iterator(); ++it)
    out.push_back({std::stoll((*it)[1]), std::stoll((*it)[2]), std::stod((*it)[3])});
  return out;
}

// Before: 2 -> 1 rank ended at step 27/36 (the schedule's end never reached, the lr jumped
// up at the resume), 2 -> 3 at step 12/12 inside epoch 2 (no evaluation of its last epoch).
TEST_CASE("resuming 2 ranks' checkpoint with 1 or 3 ranks trains to the last epoch on the same schedule") {
  const fs::path base = tmpdir("resume");
  const Run two = ringtape(synthetic(base / "two", {"--nproc-per-node", "2", "--steps", "9"}), base / "two.txt");
  INFO(two.output);
  REQUIRE(two.status == 0);
  const std::vector<Logged> before = logged_steps(two.output);
  REQUIRE(!before.empty());
  CHECK(before.back().step == 9);
  CHECK(before.back().of == 9);
  const std::string ckpt = (base / "two" / "checkpoint.safetensors").string();
  struct Case {
    int procs;
    int64_t steps_per_epoch;
  };
  for (const Case c : {Case{1, 12}, Case{3, 4}}) {
    const std::string n = std::to_string(c.procs);
    std::vector<std::string> more = {"--resume", ckpt};
    if (c.procs > 1) more.insert(more.end(), {"--nproc-per-node", n});
    const Run r = ringtape(synthetic(base / ("to" + n), more), base / ("to" + n + ".txt"));
    INFO(r.output);
    REQUIRE(r.status == 0);
    // Step 9 of 2 ranks is epoch 1, batch 3 of 6: half of epoch 1.
    const int64_t at = c.steps_per_epoch + c.steps_per_epoch / 2, total = 3 * c.steps_per_epoch;
    CHECK(r.output.find("counts as step " + std::to_string(at) + " of " + std::to_string(c.steps_per_epoch) +
                        " steps per epoch") != std::string::npos);
    const std::vector<Logged> after = logged_steps(r.output);
    REQUIRE(!after.empty());
    CHECK(after.front().step == at + 1);
    CHECK(after.back().step == total);
    CHECK(after.back().of == total);
    CHECK(r.output.find("epoch 2 eval:") != std::string::npos);  // the last epoch's evaluation
    // Cosine: the rate goes on falling from where the 2 ranks left it (one step further).
    CHECK(after.front().lr < before.back().lr);
    CHECK(after.front().lr > 0.8 * before.back().lr);
  }
}

// --threads 0 means all cores; the checkpoint records how many that was, so a resume on a
// machine (here: an OMP_NUM_THREADS) with another count is refused, as with --threads N.
TEST_CASE("the checkpoint records the CPU threads used; a resume with another count is refused") {
  const fs::path base = tmpdir("threads");
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t a = test::start(synthetic(base / "a", {"--steps", "1"}), base / "a.txt", {{"OMP_NUM_THREADS", "2"}});
  const Run ra = test::finish(a, base / "a.txt", t0);
  INFO(ra.output);
  REQUIRE(ra.status == 0);
  const std::string ckpt = (base / "a" / "checkpoint.safetensors").string();
  const auto t1 = std::chrono::steady_clock::now();
  const pid_t b = test::start(synthetic(base / "b", {"--resume", ckpt}), base / "b.txt", {{"OMP_NUM_THREADS", "1"}});
  const Run rb = test::finish(b, base / "b.txt", t1);
  INFO(rb.output);
  CHECK(rb.status == 2);
  CHECK(rb.output.find("trained with --threads 2 but this run has --threads 1") != std::string::npos);
  const auto t2 = std::chrono::steady_clock::now();
  const pid_t c = test::start(synthetic(base / "c", {"--resume", ckpt, "--steps", "2"}), base / "c.txt",
                              {{"OMP_NUM_THREADS", "2"}});
  const Run rc = test::finish(c, base / "c.txt", t2);
  INFO(rc.output);
  CHECK(rc.status == 0);
}

}  // namespace
}  // namespace rt
