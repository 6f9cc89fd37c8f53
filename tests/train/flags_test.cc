// validate_flags, through the parsers that run it (parse_train_config, parse_eval_config):
// every out-of-range value and bad combination of `ringtape train` and `ringtape eval` is a
// cli::UsageError (exit status 2) naming the flag. The exit status itself is checked on the
// binary in cli_process_test; the typed values in train_config_test.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli/flags.h"
#include "train/train_config.h"
#include "train/train_flags.h"

namespace rt {
namespace {

void validate_train(const std::vector<std::string>& args) {
  cli::Flags f(train::train_flags());
  f.parse(args);
  train::parse_train_config(f);
}

void validate_eval(const std::vector<std::string>& args) {
  cli::Flags f(train::eval_flags());
  f.parse(args);
  train::parse_eval_config(f);
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
  };
  for (const Bad& c : cases) {
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    CAPTURE(joined);
    CHECK_THROWS_WITH_AS(validate_train(c.args), doctest::Contains(c.names.c_str()), cli::UsageError);
  }
}

TEST_CASE("train: the defaults and sensible values pass") {
  validate_train({});
  validate_train({"--batch-size", "1", "--lr", "0", "--threads", "1024", "--num-classes", "1000000",
                                  "--label-smoothing", "1", "--momentum", "0", "--workers", "0", "--width", "4",
                                  "--dataset", "synthetic", "--synthetic-size", "8x1x8x8"});
  validate_train({"--init-weights", "w.safetensors", "--init-weights-non-strict"});
  validate_train({"--cudnn-benchmark", "--cudnn-benchmark-runtime-compiled"});
  // The schedule flags of another schedule are not looked at (torchvision ignores them too).
  validate_train({"--lr-scheduler", "cosine", "--lr-step-size", "0", "--lr-milestones", "x"});
}

TEST_CASE("eval: its flags are checked the same way") {
  CHECK_THROWS_WITH_AS(validate_eval({"--batch-size", "0"}), doctest::Contains("--batch-size"),
                       cli::UsageError);
  CHECK_THROWS_WITH_AS(validate_eval({"--label-smoothing", "2"}),
                       doctest::Contains("--label-smoothing"), cli::UsageError);
  CHECK_THROWS_WITH_AS(validate_eval({"--checkpoint", "c.safetensors", "--init-weights", "w"}),
                       doctest::Contains("pass one of them"), cli::UsageError);
  validate_eval({"--checkpoint", "c.safetensors"});
}

TEST_CASE("parse_synthetic_size") {
  CHECK(*train::parse_synthetic_size("256x1x28x28") == std::array<int64_t, 4>{256, 1, 28, 28});
  CHECK_FALSE(train::parse_synthetic_size("256x1x28"));
  CHECK_FALSE(train::parse_synthetic_size("256x1x28x-28"));
  CHECK_FALSE(train::parse_synthetic_size("256x1x28x28 "));
}

}  // namespace
}  // namespace rt
