// Command-line flags: a declared table of flags with types, defaults, accepted values and
// help. Parsing reports an unknown flag or a bad value as a UsageError naming the flag and
// what it accepts (the CLI exits with status 2 on those).
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace rt::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class FlagType { string, integer, number, boolean };

struct Flag {
  std::string name;                 // without the leading "--"
  FlagType type;
  std::string default_value;        // as it would be typed; "" for none
  std::string help;
  std::vector<std::string> choices; // accepted values, when a closed set
};

class Flags {
 public:
  explicit Flags(std::vector<Flag> table) : table_(std::move(table)) {}
  // Accepts "--name value", "--name=value" and bare "--name" for booleans.
  void parse(const std::vector<std::string>& args);
  std::string help(const std::string& usage) const;

  bool given(const std::string& name) const { return values_.count(name) > 0; }
  bool has(const std::string& name) const;  // the command takes this flag
  std::string str(const std::string& name) const;
  int64_t integer(const std::string& name) const;
  double number(const std::string& name) const;
  bool boolean(const std::string& name) const;
  // Every flag with its effective value (for logs and checkpoints).
  std::map<std::string, std::string> effective() const;

 private:
  const Flag& find(const std::string& name) const;
  std::vector<Flag> table_;
  std::map<std::string, std::string> values_;
};

}  // namespace rt::cli
