// Command-line flags: a declared table of flags with types, defaults, accepted values or
// ranges, help and topic. Parsing reports an unknown flag or a bad value as a UsageError
// naming the flag and what it accepts (the CLI exits with status 2 on those). The table's
// rows are the commands' own (cli/train_flags.cc: Note [One row per flag]).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/usage_error.h"

namespace rt::cli {

enum class FlagType { string, integer, number, boolean };

// The help's sections, in the order it prints them.
enum class Topic { model, data, optimisation, device, distributed, output, profiling };
const char* topic_title(Topic t);

// The values an integer or number flag accepts: [lo, hi], or (lo, hi] with open_lo. `rule`
// is how a refusal states it: "--name must be <rule>, got <value>".
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool open_lo = false;
  std::string rule;
};

// What a flag is beyond its own value (bits of Flag::roles).
enum FlagRole : unsigned {
  kTrajectory = 1,     // the training's course: --resume refuses another value (Note [Trajectory flags])
  kSameOnEveryRank = 2,  // data parallel: every rank must have rank 0's value (Note [Same flags on every rank])
  kLauncher = 4,       // the launcher's own: not passed on to the processes it starts
};

struct Flag {
  Flag(std::string name_, FlagType type_, std::string default_value_, std::string help_,
       std::vector<std::string> choices_ = {}, Topic topic_ = Topic::output, std::optional<Range> range_ = {},
       unsigned roles_ = 0)
      : name(std::move(name_)), type(type_), default_value(std::move(default_value_)), help(std::move(help_)),
        choices(std::move(choices_)), topic(topic_), range(std::move(range_)), roles(roles_) {}

  std::string name;                 // without the leading "--"
  FlagType type;
  std::string default_value;        // as it would be typed; "" for none
  std::string help;
  std::vector<std::string> choices; // accepted values, when a closed set
  Topic topic = Topic::output;
  std::optional<Range> range;       // integer and number flags
  unsigned roles = 0;               // FlagRole bits
};

class Flags {
 public:
  explicit Flags(std::vector<Flag> table) : table_(std::move(table)) {}
  // Accepts "--name value", "--name=value" and bare "--name" for booleans; checks types,
  // choices and ranges. `recipe`: the name of the recipe these values come from (cli/recipes.h),
  // which recipe_of() then reports for them; "" for the command line's own values.
  void parse(const std::vector<std::string>& args, const std::string& recipe = "");
  // The flags by topic, each with its help, choices and default, wrapped to `width` columns
  // (0: the terminal's, else $COLUMNS, else 100).
  std::string help(const std::string& usage, int width = 0) const;

  bool given(const std::string& name) const { return values_.count(name) > 0; }
  // The recipe whose value the flag has (a later value of the command line's replaces it);
  // "" for a value typed on the command line or the default. Messages about a bad value
  // name it, since the user never typed the value.
  std::string recipe_of(const std::string& name) const {
    auto it = recipe_.find(name);
    return it == recipe_.end() ? "" : it->second;
  }
  bool has(const std::string& name) const;  // the command takes this flag
  std::string str(const std::string& name) const;
  int64_t integer(const std::string& name) const;
  double number(const std::string& name) const;
  bool boolean(const std::string& name) const;
  // Every flag with its effective value (for logs and checkpoints).
  std::map<std::string, std::string> effective() const;
  const std::vector<Flag>& table() const { return table_; }

 private:
  const Flag& find(const std::string& name) const;
  std::vector<Flag> table_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> recipe_;  // flag -> the recipe that set its value
};

// "--name must be <range.rule>, got <value>" when `value` (of an integer or number flag) is
// outside its range; "" when inside or the flag has none.
std::string range_error(const Flag& f, const std::string& value);

// `args` without the flags that have `role` (and their values): what the launcher passes on.
std::vector<std::string> without_flags(const std::vector<Flag>& table, FlagRole role,
                                       const std::vector<std::string>& args);

}  // namespace rt::cli
