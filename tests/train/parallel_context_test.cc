// The trainer calls the attach points of data parallelism where
// Note [Data-parallel attach points] (train/parallel_context.h) says: a step's phases in
// order, one backward per micro-batch with only the last marked, and the optimizer-step
// phase only after it; the training sampler shards by rank; evaluation's counts go through
// sum_eval_counts; only the logging rank writes metrics and checkpoints. A recording
// context stands in for the data-parallel one.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "train/evaluate.h"
#include "train/parallel_context.h"
#include "train/setup.h"
#include "train/step.h"
#include "train/train_config.h"
#include "cli/train_flags.h"
#include "train/trainer.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

class Recorder final : public train::ParallelContext {
 public:
  // `dir`: the run directory a rank other than 0 is told rank 0 chose.
  Recorder(int rank, int world, std::string dir = "") : rank_(rank), world_(world), dir_(std::move(dir)) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string describe() const override { return "recorder"; }
  std::string agree(const std::string& key, const std::string& v) override {
    return rank_ != 0 && key == "output-dir" ? dir_ : v;
  }
  void attach(nn::Module&, nn::ComputeCopies*, const std::string&) override { events.push_back("attach"); }
  void before_evaluation(nn::Module&) override {}
  // Every rank evaluates the whole test set (sum_eval_counts below pretends they all counted).
  train::EvalShard eval_shard(int64_t n) const override { return {0, 1, n}; }
  train::OverlapStats overlap() const override { return {}; }
  void finish() override { events.push_back("finish"); }
  void check_healthy() override {
    if (!broken.empty()) throw Error(broken);
  }
  std::string broken;  // what check_healthy() throws, "" for nothing
  void before_backward(bool last) override { events.push_back(last ? "before_backward(last)" : "before_backward"); }
  void after_backward(bool last) override { events.push_back(last ? "after_backward(last)" : "after_backward"); }
  void before_optimizer_step() override { events.push_back("before_optimizer_step"); }
  // As if every rank had counted the same.
  void sum_eval_counts(train::EvalCounts& c) override {
    c.loss_sum *= world_;
    c.n *= world_;
    c.top1 *= world_;
    c.top5 *= world_;
    events.push_back("sum_eval_counts");
  }
  void sum_over_ranks(std::vector<double>& v) override {
    for (double& x : v) x *= world_;
    events.push_back("sum_over_ranks(" + std::to_string(v.size()) + ")");
  }

  std::vector<std::string> events;

 private:
  int rank_, world_;
  std::string dir_;
};

// 48 synthetic 1x8x8 images in batches of 8 (6 per epoch), a width-4 ResNet18 on the CPU.
train::TrainConfig tiny(const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {"--dataset", "synthetic", "--synthetic-size", "48x1x8x8", "--num-classes", "4",
                                   "--width", "4", "--batch-size", "8", "--workers", "0", "--device", "cpu",
                                   "--seed", "1", "--print-freq", "1"};
  args.insert(args.end(), more.begin(), more.end());
  cli::Flags f(cli::train_flags());
  f.parse(args);
  return cli::parse_train_config(f);
}

std::string tmpdir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const fs::path p = fs::path(base ? base : "/tmp") / ("parallel_context_test_" + name);
  fs::remove_all(p);
  return p.string();
}

TEST_CASE("a step's phases: a backward per micro-batch, the last one marked, then the optimizer step") {
  const train::TrainConfig cfg = tiny({"--accum-steps", "3"});
  train::Setup s = train::set_up(cfg, true);
  s.model->to(s.device, s.format);
  const auto opt = train::make_optimizer(cfg.optimizer, *s.model);
  train::MixedPrecision mp(*s.model, train::mixed_precision_options(s.precision));
  Recorder par(0, 1);
  const train::TrainData data = train::open_train_data(cfg, s, mp.input_dtype(), par);
  train::TrainStep step(*s.model, *opt, mp, par, cfg.loop, cfg.label_smoothing, s.device);

  data.feed->start_epoch(0, 0);
  train::StepOutcome o = step.run(*data.feed, train::Progress{});
  CHECK(o.complete);
  CHECK(o.samples == 24);
  CHECK(par.events == std::vector<std::string>{"before_backward", "after_backward", "before_backward",
                                               "after_backward", "before_backward(last)", "after_backward(last)",
                                               "before_optimizer_step"});

  // The epoch ends two micro-batches into the step: dropped, and it never reaches the
  // phases that communicate.
  par.events.clear();
  data.feed->start_epoch(0, 4);
  o = step.run(*data.feed, train::Progress{});
  CHECK_FALSE(o.complete);
  CHECK(o.samples == 16);
  CHECK(par.events == std::vector<std::string>{"before_backward", "after_backward", "before_backward",
                                               "after_backward"});
}

TEST_CASE("the training sampler takes this rank's shard; evaluation's counts are summed by the context") {
  const train::TrainConfig cfg = tiny();
  train::Setup s = train::set_up(cfg, true);
  s.model->to(s.device, s.format);
  train::MixedPrecision mp(*s.model, train::mixed_precision_options(s.precision));
  train::SingleProcess one;
  Recorder second_of_two(1, 2);
  CHECK(train::open_train_data(cfg, s, mp.input_dtype(), one).batches_per_epoch == 6);
  CHECK(train::open_train_data(cfg, s, mp.input_dtype(), second_of_two).batches_per_epoch == 3);

  const train::EvalResult alone = train::evaluate(s, mp, cfg, one);
  const train::EvalResult summed = train::evaluate(s, mp, cfg, second_of_two);
  CHECK(second_of_two.events == std::vector<std::string>{"sum_eval_counts"});
  CHECK(alone.n == 48);
  CHECK(summed.n == 96);
  CHECK(summed.loss == alone.loss);
  CHECK(summed.top1 == alone.top1);
}

TEST_CASE("only the logging rank writes metrics, checkpoints and weights") {
  const std::string other = tmpdir("rank1"), logging = tmpdir("rank0");
  Recorder rank1(1, 2, other), rank0(0, 2);
  CHECK(train::train(tiny({"--steps", "2", "--output-dir", other}), rank1) == 0);
  CHECK(train::train(tiny({"--steps", "2", "--output-dir", logging}), rank0) == 0);
  for (const char* file : {"metrics.jsonl", "checkpoint.safetensors", "model.safetensors"}) {
    CAPTURE(file);
    CHECK_FALSE(fs::exists(fs::path(other) / file));
    CHECK(fs::exists(fs::path(logging) / file));
  }
  // Both ran the same steps.
  CHECK(rank1.events == rank0.events);
}

// A communicator that failed (an NCCL call aborted after the optimizer step was queued
// behind it) writes no checkpoint and no weights (Note [No checkpoint after a failure]);
// the one saved before stays as it was. Before, the trainer saved without asking.
TEST_CASE("a broken communicator: no checkpoint or weights are written, the last checkpoint stays") {
  const std::string dir = tmpdir("broken");
  Recorder first(0, 2);
  REQUIRE(train::train(tiny({"--steps", "1", "--output-dir", dir}), first) == 0);
  const fs::path ckpt = fs::path(dir) / "checkpoint.safetensors", weights = fs::path(dir) / "model.safetensors";
  fs::remove(weights);
  const auto before = fs::last_write_time(ckpt);
  const std::string bytes = [&] {
    std::ifstream in(ckpt, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  Recorder rank0(0, 2);
  rank0.broken = "rank 0 of 2: all_reduce #7 failed after 1.0 s: lost rank 1 (its process exited)";
  std::string msg;
  try {
    train::train(tiny({"--steps", "2", "--output-dir", dir, "--resume", ckpt.string()}), rank0);
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK_MESSAGE(msg.find("no checkpoint saved after step 2: the communication between the ranks failed") !=
                    std::string::npos, msg);
  CHECK(msg.find("lost rank 1") != std::string::npos);
  CHECK_FALSE(fs::exists(weights));
  CHECK(fs::last_write_time(ckpt) == before);
  std::ifstream in(ckpt, std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == bytes);
}

}  // namespace
}  // namespace rt
