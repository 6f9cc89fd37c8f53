#include "cli/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace rt::cli {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

bool parse_num(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno || *end || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parse_bool(const std::string& s, bool* out) {
  if (s == "1" || s == "true" || s == "yes" || s == "on") return *out = true, true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return *out = false, true;
  return false;
}

const char* type_word(FlagType t) {
  switch (t) {
    case FlagType::integer: return "an integer";
    case FlagType::number: return "a number";
    case FlagType::boolean: return "true or false";
    default: return "a value";
  }
}

}  // namespace

const Flag& Flags::find(const std::string& name) const {
  for (const Flag& f : table_)
    if (f.name == name) return f;
  throw UsageError("unknown flag --" + name + " (see --help for the accepted flags)");
}

void Flags::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2)
      throw UsageError("unexpected argument '" + a + "': flags look like --name value (see --help)");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const Flag& f = find(name);
    if (!has_value) {
      if (f.type == FlagType::boolean && (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)) {
        value = "true";
      } else {
        if (i + 1 >= args.size()) throw UsageError("flag --" + name + " needs " + type_word(f.type));
        value = args[++i];
      }
    }
    int64_t iv;
    double dv;
    bool bv;
    if ((f.type == FlagType::integer && !parse_int(value, &iv)) || (f.type == FlagType::number && !parse_num(value, &dv)) ||
        (f.type == FlagType::boolean && !parse_bool(value, &bv)))
      throw UsageError("flag --" + name + " takes " + type_word(f.type) + ", got '" + value + "'");
    if (!f.choices.empty()) {
      bool ok = false;
      for (const auto& c : f.choices) ok |= c == value;
      if (!ok) throw UsageError("flag --" + name + ": '" + value + "' is not one of: " + join(f.choices));
    }
    values_[name] = value;
  }
}

std::string Flags::str(const std::string& name) const {
  auto it = values_.find(name);
  return it != values_.end() ? it->second : find(name).default_value;
}

int64_t Flags::integer(const std::string& name) const {
  int64_t v = 0;
  parse_int(str(name), &v);
  return v;
}

double Flags::number(const std::string& name) const {
  double v = 0;
  parse_num(str(name), &v);
  return v;
}

bool Flags::boolean(const std::string& name) const {
  bool v = false;
  parse_bool(str(name), &v);
  return v;
}

std::map<std::string, std::string> Flags::effective() const {
  std::map<std::string, std::string> m;
  for (const Flag& f : table_) m[f.name] = str(f.name);
  return m;
}

std::string Flags::help(const std::string& usage) const {
  std::ostringstream os;
  os << usage << "\n\nflags:\n";
  for (const Flag& f : table_) {
    std::string left = "  --" + f.name;
    if (f.type != FlagType::boolean) left += " " + std::string(f.type == FlagType::integer ? "N" : f.type == FlagType::number ? "X" : "VALUE");
    os << left << std::string(left.size() < 30 ? 30 - left.size() : 1, ' ') << f.help;
    if (!f.choices.empty()) os << " (" << join(f.choices) << ")";
    os << " [default: " << (f.default_value.empty() ? "none" : f.default_value) << "]\n";
  }
  return os.str();
}

bool Flags::has(const std::string& name) const {
  for (const Flag& f : table_)
    if (f.name == name) return true;
  return false;
}

}  // namespace rt::cli
