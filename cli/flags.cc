#include "cli/flags.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
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

void Flags::parse(const std::vector<std::string>& args, const std::string& recipe) {
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
    if (const std::string e = range_error(f, value); !e.empty())
      throw UsageError(recipe.empty() ? e : e + " (the recipe " + recipe + " sets it)");
    values_[name] = value;
    if (recipe.empty()) recipe_.erase(name);
    else recipe_[name] = recipe;
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

const char* topic_title(Topic t) {
  switch (t) {
    case Topic::model: return "model";
    case Topic::data: return "data";
    case Topic::optimisation: return "optimisation";
    case Topic::device: return "precision and device";
    case Topic::distributed: return "distributed";
    case Topic::output: return "output and logging";
    case Topic::profiling: return "profiling";
  }
  return "?";
}

namespace {

int terminal_width() {
  winsize w{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    const int v = std::atoi(c);
    if (v > 0) return v;
  }
  return 100;
}

// `text` in lines of at most `width` characters (a longer word gets a line of its own), the
// first after `first` columns already used, the others indented by `indent`.
std::string wrap(const std::string& text, size_t first, size_t indent, size_t width) {
  std::istringstream words(text);
  std::string out, word;
  size_t col = first;
  bool line_empty = true;
  while (words >> word) {
    if (!line_empty && col + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      col = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++col;
    }
    for (char& ch : word)
      if (ch == '\x01') ch = ' ';
    out += word;
    col += word.size();
    line_empty = false;
  }
  return out;
}

}  // namespace

std::string Flags::help(const std::string& usage, int width) const {
  const size_t w = size_t(std::max(60, width > 0 ? width : terminal_width()));
  constexpr size_t kLeft = 30;  // the column the help text starts in
  // Sections where the table has flags of several topics (train, eval); else one list.
  bool sections = false;
  for (const Flag& f : table_) sections |= f.topic != table_.front().topic;
  std::ostringstream os;
  os << usage << "\n";
  for (int t = int(Topic::model); t <= int(Topic::profiling); ++t) {
    bool heading = false;
    for (const Flag& f : table_) {
      if (int(f.topic) != t) continue;
      if (!heading) os << "\n" << (sections ? topic_title(Topic(t)) : "flags") << ":\n";
      heading = true;
      std::string left = "  --" + f.name;
      if (f.type != FlagType::boolean)
        left += f.type == FlagType::integer ? " N" : f.type == FlagType::number ? " X" : " VALUE";
      std::string text = f.help;
      if (!f.choices.empty()) text += " (" + join(f.choices) + ")";
      // \x01: a space the wrapping keeps ("[default: X]" stays on one line).
      text += " [default:\x01" + (f.default_value.empty() ? std::string("none") : f.default_value) + "]";
      if (left.size() + 2 > kLeft) os << left << "\n" << std::string(kLeft, ' ');
      else os << left << std::string(kLeft - left.size(), ' ');
      os << wrap(text, kLeft, kLeft, w) << "\n";
    }
  }
  return os.str();
}

std::string range_error(const Flag& f, const std::string& value) {
  if (!f.range || (f.type != FlagType::integer && f.type != FlagType::number)) return "";
  double v = 0;
  if (int64_t i = 0; f.type == FlagType::integer) {
    if (!parse_int(value, &i)) return "";  // the type check says it
    v = double(i);
  } else if (!parse_num(value, &v)) {
    return "";
  }
  const Range& r = *f.range;
  if (v < r.lo || (r.open_lo && v == r.lo) || v > r.hi) return "--" + f.name + " must be " + r.rule + ", got " + value;
  return "";
}

std::vector<std::string> without_flags(const std::vector<Flag>& table, FlagRole role,
                                       const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const Flag* drop = nullptr;
    bool inline_value = false;
    for (const Flag& f : table) {
      if (!(f.roles & role)) continue;
      if (args[i] == "--" + f.name) drop = &f;
      else if (args[i].rfind("--" + f.name + "=", 0) == 0) drop = &f, inline_value = true;
      if (drop) break;
    }
    if (!drop) {
      out.push_back(args[i]);
      continue;
    }
    // Its value too, where parse() takes the next argument as one.
    if (!inline_value && i + 1 < args.size() && (drop->type != FlagType::boolean || args[i + 1].rfind("--", 0) != 0))
      ++i;
  }
  return out;
}

bool Flags::has(const std::string& name) const {
  for (const Flag& f : table_)
    if (f.name == name) return true;
  return false;
}

}  // namespace rt::cli
