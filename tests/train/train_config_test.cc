// parse_train_config / parse_eval_config: the typed configuration. No flags give the structs'
// defaults (so each field's default is its flag's), every choice a flag offers maps to its
// value, and the checks still stop bad values before anything is read (flags_test lists
// every check; here the ones that belong to the parsers themselves).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli/flags.h"
#include "base/error.h"
#include "train/train_config.h"
#include "cli/train_flags.h"

namespace rt {
namespace {

using train::DatasetKind;
using train::OptimizerKind;
using train::Precision;

train::TrainConfig parse_train(const std::vector<std::string>& args) {
  cli::Flags f(cli::train_flags());
  f.parse(args);
  return cli::parse_train_config(f);
}

train::EvalConfig parse_eval(const std::vector<std::string>& args) {
  cli::Flags f(cli::eval_flags());
  f.parse(args);
  return cli::parse_eval_config(f);
}

TEST_CASE("no flags give the structs' defaults: each field defaults to its flag's default") {
  const train::TrainConfig got = parse_train({});
  const train::TrainConfig want;
  CHECK(static_cast<const train::CommonConfig&>(got) == static_cast<const train::CommonConfig&>(want));
  CHECK(got.optimizer == want.optimizer);
  CHECK(got.loop == want.loop);
  CHECK(got.output == want.output);
  CHECK(got.parallel == want.parallel);
  const optim::LrScheduleOptions& s = got.lr_schedule;
  const optim::LrScheduleOptions& w = want.lr_schedule;
  CHECK(s.kind == w.kind);
  CHECK(s.warmup_epochs == w.warmup_epochs);
  CHECK(s.warmup_decay == w.warmup_decay);
  CHECK(s.warmup_method == w.warmup_method);
  CHECK(s.step_size == w.step_size);
  CHECK(s.gamma == w.gamma);
  CHECK(s.milestones == w.milestones);
  CHECK(s.lr_min == w.lr_min);
  CHECK(s.power == w.power);
  cli::Flags f(cli::train_flags());
  f.parse({});
  CHECK(got.recorded_flags == f.effective());

  // What the help promises, on the struct side.
  CHECK(want.model.name == "resnet18");
  CHECK(want.data.dataset == DatasetKind::fashion_mnist);
  CHECK(want.loader.batch_size == 128);
  CHECK(want.loader.workers == 2);
  CHECK_FALSE(want.compute.device);     // auto
  CHECK_FALSE(want.compute.precision);  // auto
  CHECK(want.model.memory_format == MemoryFormat::channels_last);
  CHECK(want.optimizer.kind == OptimizerKind::sgd);
  CHECK(want.optimizer.lr == 0.1);
  CHECK(want.optimizer.weight_decay == 5e-4);
  CHECK(want.lr_schedule.kind == optim::LrScheduleKind::cosine);
  CHECK(want.loop.epochs == 15);
  CHECK(want.data.augment);
  CHECK(want.output.print_freq == 50);

  // eval: weights are required; everything else defaults the same, the training-only
  // fields stay at theirs.
  train::EvalConfig e;
  e.checkpoint = "c.safetensors";
  CHECK(parse_eval({"--checkpoint", "c.safetensors"}) == e);
}

TEST_CASE("every choice a flag offers parses") {
  for (const cli::Flag& flag : cli::train_flags())
    for (const std::string& v : flag.choices) {
      CAPTURE(flag.name);
      CAPTURE(v);
      CHECK_NOTHROW(parse_train({"--" + flag.name, v}));
    }
  for (const cli::Flag& flag : cli::eval_flags())
    for (const std::string& v : flag.choices) {
      CAPTURE(flag.name);
      CAPTURE(v);
      CHECK_NOTHROW(parse_eval({"--" + flag.name, v, "--checkpoint", "c.safetensors"}));
    }
}

TEST_CASE("choices become enums; auto becomes nullopt or 0") {
  for (DatasetKind d : {DatasetKind::fashion_mnist, DatasetKind::cifar10, DatasetKind::imagenet,
                        DatasetKind::synthetic, DatasetKind::tensors})
    CHECK(parse_train({"--dataset", train::dataset_name(d)}).data.dataset == d);
  CHECK(std::string(train::dataset_name(DatasetKind::fashion_mnist)) == "fashion-mnist");
  CHECK(parse_train({"--optimizer", "adamw"}).optimizer.kind == OptimizerKind::adamw);
  CHECK(parse_train({}).lr_schedule.warmup_method == optim::WarmupMethod::linear);
  CHECK(parse_train({"--lr-warmup-method", "constant"}).lr_schedule.warmup_method == optim::WarmupMethod::constant);

  CHECK_FALSE(parse_train({"--precision", "auto"}).compute.precision);
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16})
    CHECK(parse_train({"--precision", train::precision_name(p)}).compute.precision == p);

  CHECK_FALSE(parse_train({"--device", "auto"}).compute.device);
  CHECK(parse_train({"--device", "cpu"}).compute.device == Device::cpu());
  CHECK(parse_train({"--device", "cuda:1"}).compute.device == Device::cuda(1));
  CHECK_THROWS_WITH_AS(parse_train({"--device", "gpu"}), doctest::Contains("unknown device 'gpu'"), Error);

  CHECK(parse_train({"--memory-format", "contiguous"}).model.memory_format == MemoryFormat::contiguous);
  CHECK(parse_train({"--memory-format", "auto"}).model.memory_format == MemoryFormat::channels_last);
  CHECK(parse_train({"--small-stem", "true"}).model.small_stem == true);
  CHECK(parse_train({"--small-stem", "false"}).model.small_stem == false);
  CHECK(parse_train({"--stem-stride", "2"}).model.stem_stride == 2);
  CHECK(parse_train({"--width", "32"}).model.width == 32);

  const train::TrainConfig m = parse_train({"--lr-scheduler", "multistep"});
  CHECK(m.lr_schedule.kind == optim::LrScheduleKind::multistep);
  CHECK(m.lr_schedule.milestones == std::vector<int64_t>{30, 60, 80});
  CHECK(parse_train({"--lr-scheduler", "multistep", "--lr-milestones", "5,7"}).lr_schedule.milestones ==
        std::vector<int64_t>{5, 7});
  // Another schedule's milestones are not read, even when they would not parse.
  CHECK(parse_train({"--lr-milestones", "x"}).lr_schedule.milestones.empty());
}

TEST_CASE("values land in their fields") {
  const train::TrainConfig c =
      parse_train({"--steps", "7", "--accum-steps", "2", "--no-shuffle", "--skip-nonfinite", "--dataset", "synthetic",
                   "--synthetic-size", "8x1x4x6", "--init-weights", "w.safetensors", "--init-weights-non-strict",
                   "--lr", "0.10", "--seed", "9", "--checkpoint-every", "3", "--output-dir", "o", "--threads", "2",
                   "--cudnn-benchmark"});
  CHECK(c.loop.max_steps == 7);
  CHECK(c.loop.accum_steps == 2);
  CHECK_FALSE(c.loop.shuffle);
  CHECK(c.loop.skip_nonfinite);
  CHECK(c.data.synthetic_size == std::array<int64_t, 4>{8, 1, 4, 6});
  CHECK(c.init_weights == "w.safetensors");
  CHECK_FALSE(c.init_weights_strict);
  CHECK(c.optimizer.lr == 0.1);
  CHECK(c.recorded_flags.at("lr") == "0.10");  // as typed: what --resume compares
  CHECK(c.seed == 9);
  CHECK(c.output.checkpoint_every == 3);
  CHECK(c.output.output_dir == "o");
  CHECK(parse_train({"--resume", "r/checkpoint.safetensors"}).output.resume == "r/checkpoint.safetensors");
  CHECK(c.compute.threads == 2);
  CHECK(c.compute.cudnn_benchmark);
}

TEST_CASE("the parsers check before they read") {
  // A width that std::stol would half-read is the flag's error, not a conversion's.
  CHECK_THROWS_WITH_AS(parse_train({"--width", "4x"}), doctest::Contains("--width must be auto or an integer"),
                       UsageError);
  CHECK_THROWS_WITH_AS(parse_train({"--dataset", "synthetic", "--synthetic-size", "8x1"}),
                       doctest::Contains("--synthetic-size"), UsageError);
  CHECK_THROWS_WITH_AS(parse_eval({}), doctest::Contains("ringtape eval needs weights"), UsageError);
  // The checks run first: a bad value is named before the missing weights.
  CHECK_THROWS_WITH_AS(parse_eval({"--batch-size", "0"}), doctest::Contains("--batch-size"), UsageError);
}

}  // namespace
}  // namespace rt
