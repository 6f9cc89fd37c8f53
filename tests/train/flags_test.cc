// The flags' checks, through parsing (cli::Flags::parse: types, choices, the rows' ranges)
// and the parsers (check_combinations, in parse_train_config and parse_eval_config): every
// out-of-range value and bad combination of `ringtape train` and `ringtape eval` is a
// UsageError (exit status 2) naming the flag. And what is derived from the rows
// (Note [One row per flag]): defaults within their ranges and shown in the help, the help's
// sections and wrapping, the roles and the launcher's stripping. The exit status itself is checked on the
// binary in cli_process_test; the typed values in train_config_test.
#include <doctest/doctest.h>

#include <cctype>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "train/train_config.h"
#include "cli/train_flags.h"

namespace rt {
namespace {

void validate_train(const std::vector<std::string>& args) {
  cli::Flags f(cli::train_flags());
  f.parse(args);
  cli::parse_train_config(f);
}

void validate_eval(const std::vector<std::string>& args) {
  cli::Flags f(cli::eval_flags());
  f.parse(args);
  cli::parse_eval_config(f);
}

struct Bad {
  std::vector<std::string> args;
  std::string names;  // what the message must contain
};

TEST_CASE("train: each bad value is a UsageError naming its flag") {
  const std::vector<Bad> cases = {
      {{"--batch-size", "0"}, "--batch-size must be a positive integer (images per step), got 0"},
      {{"--batch-size", "-3"}, "--batch-size"},
      {{"--epochs", "0"}, "--epochs must be a positive integer, got 0"},
      {{"--steps", "-1"}, "--steps"},
      {{"--checkpoint-every", "-2"}, "--checkpoint-every"},
      {{"--lr", "-1"}, "--lr must be a number >= 0 (the peak learning rate), got -1"},
      {{"--threads", "-1"}, "--threads must be in [0, 1024]"},
      {{"--threads", "100000"}, "--threads must be in [0, 1024]"},
      {{"--num-classes", "-5"}, "--num-classes must be in [0, 1000000]"},
      {{"--num-classes", "3000000000"}, "--num-classes must be in [0, 1000000]"},
      {{"--workers", "-1"}, "--workers"},
      {{"--print-freq", "0"}, "--print-freq"},
      {{"--accum-steps", "0"}, "--accum-steps"},
      {{"--momentum", "-0.5"}, "--momentum"},
      {{"--weight-decay", "-1e-4"}, "--weight-decay"},
      {{"--label-smoothing", "1.5"}, "--label-smoothing must be in [0, 1]"},
      {{"--label-smoothing", "-0.1"}, "--label-smoothing"},
      {{"--train-crop-size", "0"}, "--train-crop-size"},
      {{"--val-resize-size", "-1"}, "--val-resize-size"},
      {{"--val-crop-size", "-3"}, "--val-crop-size"},
      {{"--width", "0"}, "--width"},
      {{"--width", "4x"}, "--width"},
      {{"--dataset", "synthetic", "--synthetic-size", "0x1x8x8"}, "--synthetic-size"},
      {{"--dataset", "synthetic", "--synthetic-size", "8x1x8x8junk"}, "--synthetic-size"},
      {{"--nesterov", "--momentum", "0"}, "--nesterov needs --momentum > 0"},
      {{"--lr-warmup-epochs", "9", "--epochs", "5"}, "--lr-warmup-epochs must be in [0, --epochs] = [0, 5]"},
      {{"--lr-warmup-decay", "0"}, "--lr-warmup-decay must be in (0, 1]"},
      {{"--lr-scheduler", "step", "--lr-step-size", "0"}, "--lr-step-size"},
      {{"--lr-scheduler", "multistep", "--lr-milestones", "30,20"}, "--lr-milestones"},
      {{"--lr-scheduler", "multistep", "--lr-milestones", "x"}, "--lr-milestones"},
      {{"--lr-scheduler", "cosine", "--lr-min", "1"}, "--lr-min must be in [0, --lr]"},
      {{"--lr-scheduler", "poly", "--lr-power", "0"}, "--lr-power"},
      {{"--small-stem", "false", "--stem-stride", "2"}, "--stem-stride 2 needs the small stem"},
      {{"--init-weights", "a.safetensors", "--resume", "b/checkpoint.safetensors"}, "pass one of them"},
      {{"--init-weights-non-strict"}, "--init-weights-non-strict applies to --init-weights"},
      {{"--cudnn-benchmark-runtime-compiled"}, "--cudnn-benchmark-runtime-compiled applies to --cudnn-benchmark"},
      // Before: 1e-30 passed here and failed in every worker; the timeout's bound was unsaid.
      {{"--nproc-per-node", "2", "--bucket-cap-mb", "1e-30"}, "--bucket-cap-mb must be in [0.000001, 1048576] (MiB"},
      {{"--nproc-per-node", "2", "--timeout", "1e8"}, "--timeout must be in (0, 10000000] seconds, got 1e8"},
      // Before: silently ignored (torchvision ignores them too).
      {{"--dataset", "imagenet", "--ra-magnitude", "5"}, "--ra-magnitude applies to --auto-augment ra"},
      {{"--dataset", "imagenet", "--auto-augment", "ta_wide", "--ra-magnitude", "5"},
       "--ra-magnitude applies to --auto-augment ra"},
      {{"--dataset", "imagenet", "--augmix-severity", "5"}, "--augmix-severity applies to --auto-augment augmix"},
      {{"--test-only", "--model-ema", "--init-weights", "w.safetensors"}, "holds no EMA weights"},
      {{"--dataset", "webdataset", "--ra-sampler"}, "--ra-sampler false"},
      {{"--max-image-pixels", "-1"}, "--max-image-pixels must be"},
  };
  for (const Bad& c : cases) {
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    CAPTURE(joined);
    CHECK_THROWS_WITH_AS(validate_train(c.args), doctest::Contains(c.names.c_str()), UsageError);
  }
}

TEST_CASE("train: the defaults and sensible values pass") {
  validate_train({});
  validate_train({"--batch-size", "1", "--lr", "0", "--threads", "1024", "--num-classes", "1000000",
                                  "--label-smoothing", "1", "--momentum", "0", "--workers", "0", "--width", "4",
                                  "--dataset", "synthetic", "--synthetic-size", "8x1x8x8"});
  validate_train({"--init-weights", "w.safetensors", "--init-weights-non-strict"});
  validate_train({"--cudnn-benchmark", "--cudnn-benchmark-runtime-compiled"});
  validate_train({"--dataset", "imagenet", "--auto-augment", "ra", "--ra-magnitude", "5"});
  validate_train({"--dataset", "imagenet", "--ra-magnitude", "9"});  // the default: nothing is ignored
  validate_train({"--dataset", "imagenet", "--auto-augment", "augmix", "--augmix-severity", "5"});
  validate_train({"--test-only", "--model-ema", "--resume", "run/checkpoint.safetensors"});
  validate_train({"--test-only", "--init-weights", "w.safetensors"});
  validate_train({"--dataset", "webdataset", "--ra-sampler", "false"});
  validate_train({"--max-image-pixels", "0"});
  // The schedule flags of another schedule are not looked at (torchvision ignores them too).
  validate_train({"--lr-scheduler", "cosine", "--lr-step-size", "0", "--lr-milestones", "x"});
}

TEST_CASE("eval: its flags are checked the same way") {
  CHECK_THROWS_WITH_AS(validate_eval({"--batch-size", "0"}), doctest::Contains("--batch-size"),
                       UsageError);
  CHECK_THROWS_WITH_AS(validate_eval({"--label-smoothing", "2"}),
                       doctest::Contains("--label-smoothing"), UsageError);
  CHECK_THROWS_WITH_AS(validate_eval({"--checkpoint", "c.safetensors", "--init-weights", "w"}),
                       doctest::Contains("pass one of them"), UsageError);
  validate_eval({"--checkpoint", "c.safetensors"});
}

TEST_CASE("parse_synthetic_size") {
  CHECK(*cli::parse_synthetic_size("256x1x28x28") == std::array<int64_t, 4>{256, 1, 28, 28});
  CHECK_FALSE(cli::parse_synthetic_size("256x1x28"));
  CHECK_FALSE(cli::parse_synthetic_size("256x1x28x-28"));
  CHECK_FALSE(cli::parse_synthetic_size("256x1x28x28 "));
  // Before: accepted here, then "element count does not fit in int64" at set-up (exit 1).
  CHECK_FALSE(cli::parse_synthetic_size("4x3x4294967296x4294967296"));
  CHECK_THROWS_WITH_AS(validate_train({"--dataset", "synthetic", "--synthetic-size", "4x3x4294967296x4294967296"}),
                       doctest::Contains("--synthetic-size must be N x C x H x W with four positive integers whose "
                                         "product fits in int64"),
                       UsageError);
}

// What is derived from the rows (Note [One row per flag]).
TEST_CASE("every default lies in its flag's range, and the help shows each default") {
  for (const std::vector<cli::Flag>& table : {cli::train_flags(), cli::eval_flags()})
    for (const cli::Flag& f : table) {
      CAPTURE(f.name);
      CHECK(cli::range_error(f, f.default_value) == "");
    }
  const cli::Flags f(cli::train_flags());
  // Wrapped lines joined: each run of spaces and line breaks as one space.
  std::string help;
  for (char ch : f.help("usage: ringtape train [flags]", 100))
    if (!std::isspace(static_cast<unsigned char>(ch))) help += ch;
    else if (!help.empty() && help.back() != ' ') help += ' ';
  for (const cli::Flag& flag : f.table()) {
    CAPTURE(flag.name);
    const size_t at = help.find("--" + flag.name + " ");
    REQUIRE(at != std::string::npos);
    CHECK(help.find("[default: " + (flag.default_value.empty() ? std::string("none") : flag.default_value) + "]", at) !=
          std::string::npos);
  }
}

TEST_CASE("the help: sections by topic in a fixed order, lines wrapped to the width") {
  const std::string help = cli::Flags(cli::train_flags()).help("usage: ringtape train [flags]", 80);
  size_t last = 0;
  for (const char* section : {"\nmodel:\n", "\ndata:\n", "\noptimisation:\n", "\nprecision and device:\n",
                              "\ndistributed:\n", "\noutput and logging:\n", "\nprofiling:\n"}) {
    CAPTURE(section);
    const size_t at = help.find(section);
    REQUIRE(at != std::string::npos);
    CHECK(at > last);
    last = at;
  }
  CHECK(help.find("--model ") < help.find("--lr "));
  CHECK(help.find("--lr ") < help.find("--profile-steps "));
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    CAPTURE(line);
    // A single word longer than the line (a long path in a default) may overflow it.
    if (line.find(' ', 31) != std::string::npos) CHECK(line.size() <= 80);
  }
  // eval has no training-only flags.
  const std::string eval = cli::Flags(cli::eval_flags()).help("usage: ringtape eval [flags]", 80);
  CHECK(eval.find("--checkpoint ") != std::string::npos);
  CHECK(eval.find("--epochs") == std::string::npos);
  CHECK(eval.find("--nproc-per-node") == std::string::npos);
}

TEST_CASE("roles from the rows: the trajectory, the flags compared across ranks, the launcher's") {
  const std::set<std::string> trajectory = cli::train_flags_with(cli::kTrajectory);
  const std::set<std::string> same = cli::train_flags_with(cli::kSameOnEveryRank);
  const std::set<std::string> launcher = cli::train_flags_with(cli::kLauncher);
  for (const char* k : {"model", "batch-size", "lr", "seed", "threads", "precision", "sync-bn", "grad-reduce-dtype"})
    CHECK(trajectory.count(k) == 1);
  for (const char* k : {"output-dir", "print-freq", "workers", "nproc-per-node", "timeout", "bucket-cap-mb"})
    CHECK(trajectory.count(k) == 0);
  CHECK(same.count("threads") == 0);  // a rank's CPU math is its own computation
  for (const char* k : {"bucket-cap-mb", "allreduce", "find-unused-parameters", "model", "lr"}) CHECK(same.count(k) == 1);
  CHECK(launcher == std::set<std::string>{"master-addr", "master-port", "max-restarts", "nnodes", "node-rank",
                                         "nproc-per-node", "rdzv-timeout"});
  // What the launcher passes on to its workers: "--f v", "--f=v"; other flags and values stay.
  CHECK(cli::without_flags(cli::train_flags(), cli::kLauncher,
                           {"--nproc-per-node", "4", "--lr", "0.1", "--master-port=123", "--nnodes", "1",
                            "--no-shuffle", "--batch-size", "8"}) ==
        std::vector<std::string>{"--lr", "0.1", "--no-shuffle", "--batch-size", "8"});
}

}  // namespace
}  // namespace rt
