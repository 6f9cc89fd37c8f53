// The flags of `ringtape train` and `ringtape eval`: torchvision's
// references/classification/train.py names where one exists.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/flags.h"

namespace rt::train {

std::vector<cli::Flag> train_flags();
std::vector<cli::Flag> eval_flags();

// Every check of flag values that parsing alone cannot do: ranges (--batch-size > 0,
// --label-smoothing in [0, 1], --threads <= 1024, ...) and combinations (--nesterov needs
// --momentum, --init-weights with --resume). Throws cli::UsageError naming the flag, the
// value and what it accepts (the CLI exits with status 2). parse_train_config and
// parse_eval_config (train/train_config.h) call it first, so nothing after them re-checks
// these values.
void validate_flags(const cli::Flags& flags);

// --synthetic-size "NxCxHxW" -> {N, C, H, W}; nullopt unless four positive integers.
std::optional<std::array<int64_t, 4>> parse_synthetic_size(const std::string& text);

}  // namespace rt::train
