// The flags of `ringtape train` and `ringtape eval`, one row each (Note [One row per flag]):
// torchvision's references/classification/train.py names where one exists.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "train/train_config.h"

namespace rt::cli {

// Note [One row per flag]
// A flag of `ringtape train` or `ringtape eval` is one row: the flag itself (name, type,
// default, help, choices or range, its section of the help, its roles: part of the training's
// trajectory, the same on every rank, the launcher's own) and the setter that puts its value
// into its field of the typed configuration (train/train_config.h). Parsing and the range
// checks (Flags), the help, the setters' run (parse_train_config, parse_eval_config),
// the trajectory set --resume compares (train/resume.h), the flags compared across ranks and
// the launcher's stripping are all derived from the rows. What one row cannot say (a bound
// that is another flag's value, a flag that needs another) is in check_combinations, beside
// the rows. Adding a flag: its field (which holds its default: Note [Defaults from the config]),
// its row, and the code that uses the field.

// The value of the flag a setter is for (its row's name), typed.
struct FlagValue {
  const Flags& flags;
  const std::string& name;
  std::string str() const { return flags.str(name); }
  int64_t integer() const { return flags.integer(name); }
  double number() const { return flags.number(name); }
  bool boolean() const { return flags.boolean(name); }
};

struct FlagRow {
  Flag flag;
  // Which commands take it: both (`common`), train only (`train`) or eval only (`eval`); the
  // setter may be empty for a flag another row's setter reads (--profile-group).
  std::function<void(const FlagValue&, train::CommonConfig&)> common;
  std::function<void(const FlagValue&, train::TrainConfig&)> train;
  std::function<void(const FlagValue&, train::EvalConfig&)> eval;
  bool train_only = false, eval_only = false;
};

const std::vector<FlagRow>& flag_rows();
std::vector<Flag> train_flags();
std::vector<Flag> eval_flags();

// The names of `ringtape train`'s flags that have `role`.
std::set<std::string> train_flags_with(FlagRole role);

// The checks of flag values that one row cannot make: a bound that is another flag's value
// (--lr-warmup-epochs <= --epochs), a flag that needs another (--nesterov needs --momentum),
// values of another schedule's flags only when that schedule is used, the formats of --width
// and --synthetic-size. Throws UsageError naming the flag, the value and what it
// accepts (the CLI exits with status 2). parse_train_config and parse_eval_config call it
// first, so nothing after them re-checks these values.
void check_combinations(const Flags& flags);

// --synthetic-size "NxCxHxW" -> {N, C, H, W}; nullopt unless four positive integers whose
// product (the element count) fits in int64.
std::optional<std::array<int64_t, 4>> parse_synthetic_size(const std::string& text);

// The flags of train_flags() / eval_flags(), checked (check_combinations, and eval's need for
// weights), as the typed configuration: each row's setter puts its value into its field, and
// the train configuration carries the flags as typed with the names of its trajectory and
// same-on-every-rank flags (Note [One row per flag]). Throws UsageError.
train::TrainConfig parse_train_config(const Flags& flags);
train::EvalConfig parse_eval_config(const Flags& flags);

}  // namespace rt::cli
