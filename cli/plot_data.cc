#include "cli/plot_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "cli/flags.h"
#include "base/error.h"
#include "engine/io/json.h"

namespace rt::cli {
namespace {

namespace fs = std::filesystem;
using detail::cat;

// A file of garbage must not print a million warnings: the first few name their line, the
// rest are counted.
constexpr int kMaxWarnings = 5;

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) { out_.path = path; }

  void line(std::string_view text, int64_t number, bool last_unterminated) {
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) return;
    json::Value v;
    try {
      v = json::parse(text);
    } catch (const Error&) {
      // MetricsLog writes a line and its newline in one write: a line without one at the end
      // of the file is still being written (or was cut by a crash).
      if (last_unterminated) return warn(number, "is incomplete (the run is still writing it?): ignored", false);
      return warn(number, "is not JSON (cut short by a crash before a resume?): skipped", true);
    }
    const json::Value* type = v.is_object() ? v.find("type") : nullptr;
    if (!type || !type->is_string()) return warn(number, "is not a metrics record (no \"type\"): skipped", true);
    ++records_;
    if (type->as_string() == "train") return train(v, number);
    if (type->as_string() == "eval") return eval(v, number);
    // "overlap" and any later record type: not plotted.
  }

  RunMetrics finish() {
    if (warnings_ > kMaxWarnings)
      out_.warnings.push_back(cat(path_, ": ", warnings_ - kMaxWarnings, " more line(s) skipped"));
    RT_CHECK(records_ > 0 || bad_lines_ == 0, path_, " holds no metrics record (", bad_lines_,
             " line(s), none a JSON object with a \"type\"): is it a metrics.jsonl written by ringtape train?");
    return std::move(out_);
  }

 private:
  void warn(int64_t number, const std::string& what, bool bad) {
    bad_lines_ += bad;
    if (++warnings_ <= kMaxWarnings) out_.warnings.push_back(cat(path_, ":", number, ": the line ", what));
  }

  // A step or epoch: an integer, else the record is skipped (nullopt-like: false).
  bool integer(const json::Value& v, const char* key, int64_t number, int64_t* out) {
    const json::Value* f = v.find(key);
    if (f && f->is_int()) return *out = f->as_int(), true;
    warn(number, cat("has no integer \"", key, "\": skipped"), true);
    return false;
  }

  // A plotted value: a number; null (NaN in the run) or absent is NaN, a gap in the line.
  double number(const json::Value& v, const char* key, int64_t number) {
    const json::Value* f = v.find(key);
    if (!f || f->is_null()) return NAN;
    if (f->is_number()) return f->as_double();
    warn(number, cat("has \"", key, "\" of type ", f->type_name(), ", not a number: not plotted"), false);
    return NAN;
  }

  void train(const json::Value& v, int64_t n) {
    TrainPoint p;
    if (!integer(v, "step", n, &p.step) || !integer(v, "epoch", n, &p.epoch)) return;
    p.loss = number(v, "loss", n);
    p.lr = number(v, "lr", n);
    p.img_per_s = number(v, "img_per_s", n);
    auto& t = out_.train;
    if (!t.empty() && p.step <= t.back().step) {  // Note [Resumed runs]
      std::erase_if(t, [&](const TrainPoint& q) { return q.step >= p.step; });
      std::erase_if(out_.eval, [&](const EvalPoint& q) { return q.step >= p.step; });
    }
    t.push_back(p);
  }

  void eval(const json::Value& v, int64_t n) {
    EvalPoint p;
    if (!integer(v, "epoch", n, &p.epoch)) return;
    const json::Value* step = v.find("step");
    p.step = step && step->is_int() ? step->as_int() : 0;
    p.loss = number(v, "loss", n);
    p.top1 = number(v, "top1", n);
    p.top5 = number(v, "top5", n);
    // A resumed run evaluating an epoch again: the later evaluation wins (Note [Resumed runs]).
    std::erase_if(out_.eval, [&](const EvalPoint& q) { return q.epoch >= p.epoch; });
    out_.eval.push_back(p);
  }

  std::string path_;
  RunMetrics out_;
  int64_t records_ = 0, bad_lines_ = 0, warnings_ = 0;
};

std::string join_tail(const std::vector<std::string>& parts, size_t k) {
  std::string s;
  for (size_t i = parts.size() - std::min(k, parts.size()); i < parts.size(); ++i)
    s += (s.empty() ? "" : "/") + parts[i];
  return s.empty() ? "/" : s;
}

}  // namespace

RunMetrics parse_metrics(std::string_view text, const std::string& path) {
  Reader r(path);
  int64_t number = 0;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const bool unterminated = end == std::string_view::npos;
    r.line(text.substr(start, unterminated ? std::string_view::npos : end - start), ++number, unterminated);
    if (unterminated) break;
    start = end + 1;
  }
  return r.finish();
}

RunMetrics read_run(const std::string& run_dir) {
  const fs::path dir(run_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError(cat("run directory '", run_dir, "' ",
                         fs::exists(dir, ec) ? "is not a directory" : "does not exist",
                         ": give the --output-dir of a ringtape train run"));
  const fs::path file = dir / "metrics.jsonl";
  if (!fs::exists(file, ec))
    throw UsageError(cat("'", file.string(), "' does not exist: '", run_dir,
                         "' must be the --output-dir of a ringtape train run (it writes metrics.jsonl there "
                         "when its first step is logged)"));
  std::ifstream in(file, std::ios::binary);
  RT_CHECK(in, "cannot open '", file.string(), "' for reading (permissions?)");
  std::stringstream ss;
  ss << in.rdbuf();
  RT_CHECK(!in.bad(), "reading '", file.string(), "' failed");
  return parse_metrics(ss.str(), file.string());
}

std::vector<std::string> run_labels(const std::vector<std::string>& run_dirs) {
  std::vector<std::vector<std::string>> parts;
  for (const auto& d : run_dirs) {
    // Absolute, so that "." and "../x" are named by their real directories.
    std::vector<std::string> p;
    for (const auto& c : fs::absolute(fs::path(d)).lexically_normal())
      if (!c.empty() && c != c.root_path()) p.push_back(c.string());
    parts.push_back(p);
  }
  const size_t n = run_dirs.size();
  std::vector<size_t> depth(n, 1);
  std::vector<std::string> labels(n);
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < n; ++i) labels[i] = join_tail(parts[i], depth[i]);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j)
        if (i != j && labels[i] == labels[j] && parts[i] != parts[j] && depth[i] < parts[i].size()) {
          ++depth[i];
          grew = true;
          break;
        }
  }
  // The same directory twice: numbered.
  std::map<std::string, int> seen;
  for (auto& l : labels)
    if (int k = ++seen[l]; k > 1) l += cat(" (", k, ")");
  return labels;
}

}  // namespace rt::cli
