// parse_train_config / parse_eval_config: the typed configuration. No flags give the structs'
// defaults (so each field's default is its flag's), every choice a flag offers maps to its
// value, and the checks still stop bad values before anything is read (flags_test lists
// every check; here the ones that belong to the parsers themselves).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "base/usage_error.h"
#include "cli/flags.h"
#include "train/train_config.h"
#include "cli/recipes.h"
#include "cli/train_flags.h"
#include "data/datasets/dataset_registry.h"
#include "train/setup.h"

namespace rt {
namespace {

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
  CHECK(got.ema == want.ema);
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
  train::TrainConfig all = got;  // and nothing else differs
  all.recorded_flags.clear();
  all.trajectory_flags.clear();
  all.same_on_every_rank_flags.clear();
  CHECK(all == want);

  // What the help promises, on the struct side.
  CHECK(want.model.name == "resnet18");
  CHECK(want.data.dataset == "fashion-mnist");
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
  CHECK(want.ema.decay == 0.99998);  // torchvision's --model-ema-decay
  CHECK(want.ema.steps == 32);
  CHECK_FALSE(want.ema.enabled);

  // eval: weights are required; everything else defaults the same, the training-only
  // fields stay at theirs.
  train::EvalConfig e;
  e.checkpoint = "c.safetensors";
  CHECK(parse_eval({"--checkpoint", "c.safetensors"}) == e);
}

// The default the help prints after "--name" (up to its "]"), or "" when the help has no such row.
std::string printed_default(const std::string& help, const std::string& name) {
  size_t at = help.find("\n  --" + name + " ");
  if (at == std::string::npos) at = help.find("\n  --" + name + "\n");
  if (at == std::string::npos) return "";
  const size_t from = help.find("[default: ", at);
  if (from == std::string::npos) return "";
  const size_t start = from + std::string("[default: ").size();
  return help.substr(start, help.find(']', start) - start);
}

// Note [Defaults from the config] (cli/train_flags.cc): a row whose default were a literal
// other than its field's would set another value here. Every row of both commands.
TEST_CASE("every row's printed default is its field's default-constructed value") {
  const std::string train_help = cli::Flags(cli::train_flags()).help("usage", 200);
  const std::string eval_help = cli::Flags(cli::eval_flags()).help("usage", 200);
  cli::Flags train_flags(cli::train_flags()), eval_flags(cli::eval_flags());
  train_flags.parse({});
  eval_flags.parse({});
  for (const cli::FlagRow& r : cli::flag_rows()) {
    CAPTURE(r.flag.name);
    const std::string shown = r.flag.default_value.empty() ? "none" : r.flag.default_value;
    if (!r.eval_only) {
      CHECK(printed_default(train_help, r.flag.name) == shown);
      CHECK(train_flags.str(r.flag.name) == r.flag.default_value);
      train::TrainConfig c;
      const cli::FlagValue v{train_flags, r.flag.name};
      if (r.common) r.common(v, c);
      if (r.train) r.train(v, c);
      CHECK(c == train::TrainConfig{});
    }
    if (!r.train_only) {
      CHECK(printed_default(eval_help, r.flag.name) == shown);
      train::EvalConfig c;
      const cli::FlagValue v{eval_flags, r.flag.name};
      if (r.common) r.common(v, c);
      if (r.eval) r.eval(v, c);
      CHECK(c == train::EvalConfig{});
    }
  }
  // A row that only another row's setter reads (--ra-reps: --ra-sampler's), on its default.
  CHECK(parse_train({"--ra-sampler"}).data.ra_repetitions == 3);
}

TEST_CASE("every choice a flag offers parses") {
  for (const cli::Flag& flag : cli::train_flags())
    for (const std::string& v : flag.choices) {
      CAPTURE(flag.name);
      CAPTURE(v);
      // The policies apply to the JPEG pipeline's RGB images only (check_combinations).
      std::vector<std::string> args = {"--" + flag.name, v};
      if (flag.name == "auto-augment") args.insert(args.end(), {"--dataset", "imagenet"});
      CHECK_NOTHROW(parse_train(args));
    }
  for (const cli::Flag& flag : cli::eval_flags())
    for (const std::string& v : flag.choices) {
      CAPTURE(flag.name);
      CAPTURE(v);
      CHECK_NOTHROW(parse_eval({"--" + flag.name, v, "--checkpoint", "c.safetensors"}));
    }
}

TEST_CASE("choices become enums; auto becomes nullopt or 0") {
  // --dataset offers the registry's names (data/datasets/dataset_registry.h), in its order.
  CHECK(cli::Flags(cli::train_flags()).help("", 200).find(
            "(fashion-mnist, cifar10, imagenet, webdataset, synthetic, tensors)") != std::string::npos);
  for (const std::string& d : data::dataset_names()) CHECK(parse_train({"--dataset", d}).data.dataset == d);
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
  CHECK(parse_train({"--lr-milestones", "x"}).lr_schedule.milestones == train::TrainConfig{}.lr_schedule.milestones);
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
  // --max-image-pixels: into the config, and from there into the image decoders' options.
  const train::TrainConfig px = parse_train({"--dataset", "imagenet", "--max-image-pixels", "1000"});
  CHECK(px.data.max_image_pixels == 1000);
  CHECK(train::dataset_options(px).image_folder.max_image_pixels == 1000);
  CHECK(train::dataset_options(parse_train({})).image_folder.max_image_pixels == 178956970);
  CHECK(parse_eval({"--checkpoint", "c.safetensors", "--max-image-pixels", "0"}).data.max_image_pixels == 0);
}

TEST_CASE("the recipe flags land in their fields") {
  const train::TrainConfig c = parse_train(
      {"--dataset", "imagenet", "--auto-augment", "ra", "--ra-magnitude", "5",
       "--interpolation", "nearest", "--random-erase", "0.25", "--mixup-alpha", "0.2", "--cutmix-alpha", "1",
       "--ra-sampler", "--ra-reps", "4", "--norm-weight-decay", "0", "--bias-weight-decay", "1e-5", "--optimizer",
       "lars", "--lars-eta", "0.002", "--lars-exclude-bn-bias", "false", "--clip-grad-norm", "2.5", "--model-ema",
       "--model-ema-steps", "8", "--model-ema-decay", "0.999", "--lr-warmup-method", "mlperf", "--test-only",
       "--resume", "r/checkpoint.safetensors"});
  CHECK(c.data.auto_augment.policy == data::AutoAugmentPolicy::ra);
  CHECK(c.data.auto_augment.ra_magnitude == 5);
  CHECK(parse_train({"--dataset", "imagenet", "--auto-augment", "augmix", "--augmix-severity", "4"})
            .data.auto_augment.augmix_severity == 4);
  CHECK(c.data.interpolation == data::Interpolation::nearest);
  CHECK(c.data.auto_augment.interpolation == data::Interpolation::nearest);  // one flag for both
  CHECK(c.data.random_erase == 0.25);
  CHECK(c.data.mixup_alpha == 0.2);
  CHECK(c.data.cutmix_alpha == 1.0);
  CHECK(c.data.ra_repetitions == 4);
  CHECK(parse_train({"--ra-reps", "4"}).data.ra_repetitions == 0);  // without --ra-sampler: off
  CHECK(c.optimizer.norm_weight_decay == 0.0);
  CHECK(c.optimizer.bias_weight_decay == 1e-5);
  CHECK_FALSE(parse_train({}).optimizer.norm_weight_decay);
  CHECK(c.optimizer.kind == OptimizerKind::lars);
  CHECK(c.optimizer.lars_eta == 0.002);
  CHECK_FALSE(c.optimizer.lars_exclude_bn_bias);
  CHECK(c.optimizer.clip_grad_norm == 2.5);
  CHECK(c.ema.enabled);
  CHECK(c.ema.steps == 8);
  CHECK(c.ema.decay == 0.999);
  CHECK(c.lr_schedule.warmup_method == optim::WarmupMethod::mlperf);
  CHECK(c.loop.test_only);
  // Their refusals.
  CHECK_THROWS_WITH_AS(parse_train({"--auto-augment", "ra"}), doctest::Contains("applies to --dataset imagenet"),
                       UsageError);
  CHECK_THROWS_WITH_AS(parse_train({"--norm-weight-decay", "x"}),
                       doctest::Contains("--norm-weight-decay must be none (--weight-decay applies) or a number >= 0"),
                       UsageError);
  CHECK_THROWS_WITH_AS(parse_train({"--bias-weight-decay", "-1"}), doctest::Contains("got -1"), UsageError);
  CHECK_THROWS_WITH_AS(parse_train({"--bias-weight-decay", "0", "--no-bn-bias-decay"}),
                       doctest::Contains("pass one of them"), UsageError);
  CHECK_THROWS_WITH_AS(parse_train({"--test-only"}), doctest::Contains("--test-only evaluates the weights of"),
                       UsageError);
}

TEST_CASE("--recipe: its flags first, the command line's override them, eval takes what it has") {
  std::string said;
  const std::vector<std::string> args = {"--recipe", "torchvision-v2", "--epochs", "10", "--dataset", "imagenet"};
  const std::vector<std::string> x = cli::expand_recipe(args, cli::train_flags(), &said);
  cli::Flags f(cli::train_flags());
  f.parse(x);
  const train::TrainConfig c = cli::parse_train_config(f);
  CHECK(c.loop.epochs == 10);  // the command line's
  CHECK(c.optimizer.lr == 0.5);
  CHECK(c.data.auto_augment.policy == data::AutoAugmentPolicy::ta_wide);
  CHECK(c.ema.enabled);
  CHECK(c.data.ra_repetitions == 4);
  CHECK(c.data.train_crop_size == 176);
  CHECK(c.optimizer.norm_weight_decay == 0.0);
  CHECK(c.recorded_flags.at("recipe") == "torchvision-v2");
  CHECK_MESSAGE(said.find("recipe torchvision-v2") == 0, said);
  CHECK_MESSAGE(said.find("--epochs (the recipe's 600)") != std::string::npos, said);
  // eval keeps the model and the evaluation sizes, not the training's flags.
  const std::vector<std::string> e = cli::expand_recipe({"--recipe=torchvision-v2"}, cli::eval_flags(), nullptr);
  cli::Flags ef(cli::eval_flags());
  ef.parse(e);
  CHECK(ef.integer("val-resize-size") == 232);
  CHECK(ef.str("model") == "resnet50");
  // Every recipe parses and passes the checks (on the JPEG pipeline they are written for).
  for (const std::string& name : cli::recipe_names()) {
    CAPTURE(name);
    cli::Flags g(cli::train_flags());
    g.parse(cli::expand_recipe({"--recipe", name, "--dataset", "imagenet"}, cli::train_flags(), nullptr));
    CHECK_NOTHROW(cli::parse_train_config(g));
  }
  CHECK(parse_train(cli::expand_recipe({"--recipe", "mlperf"}, cli::train_flags(), nullptr)).optimizer.kind ==
        OptimizerKind::lars);
  CHECK_THROWS_WITH_AS(cli::expand_recipe({"--recipe", "v3"}, cli::train_flags(), nullptr),
                       doctest::Contains("'v3' is not one of: none, torchvision-v1, torchvision-v2, mlperf"),
                       UsageError);
}

TEST_CASE("a bad value that the recipe set says so, and how to override it") {
  cli::Flags f(cli::train_flags());
  cli::parse_with_recipe(f, {"--recipe", "torchvision-v2", "--dataset", "imagenet", "--epochs", "2"}, nullptr);
  CHECK(f.recipe_of("lr-warmup-epochs") == "torchvision-v2");
  CHECK(f.recipe_of("epochs") == "");  // the command line's
  CHECK_THROWS_WITH_AS(cli::parse_train_config(f),
                       doctest::Contains("the recipe torchvision-v2 sets --lr-warmup-epochs 5; pass "
                                         "--lr-warmup-epochs N (in [0, --epochs] = [0, 2])"),
                       UsageError);
  cli::Flags g(cli::train_flags());
  cli::parse_with_recipe(g, {"--recipe", "torchvision-v2", "--dataset", "imagenet", "--epochs", "2",
                             "--lr-warmup-epochs", "1"}, nullptr);
  CHECK(g.recipe_of("lr-warmup-epochs") == "");
  CHECK(cli::parse_train_config(g).lr_schedule.warmup_epochs == 1);
  // A value typed on the command line is the user's: no recipe is named.
  cli::Flags h(cli::train_flags());
  cli::parse_with_recipe(h, {"--epochs", "2", "--lr-warmup-epochs", "5"}, nullptr);
  try {
    cli::parse_train_config(h);
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("recipe") == std::string::npos);
  }
  // --ra-sampler from the recipe with shards: named as the recipe's, with the flag that turns it off.
  cli::Flags w(cli::train_flags());
  cli::parse_with_recipe(w, {"--recipe", "torchvision-v2", "--dataset", "webdataset", "--lr-warmup-epochs", "0"},
                         nullptr);
  CHECK_THROWS_WITH_AS(cli::parse_train_config(w),
                       doctest::Contains("the recipe torchvision-v2 sets --ra-sampler true"), UsageError);
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
