#include "train/progress_bar.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace rt::train {
namespace {

constexpr int kMinBar = 10, kMaxBar = 50;  // the bar's characters between [ ]
constexpr int kDefaultColumns = 80;

std::string printf_str(const char* fmt, double v) {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

// "87.3", "1843", "12.5k", "3.1M": short for any rate a machine could reach.
std::string fmt_rate(double r) {
  if (std::isnan(r)) return "-";
  if (r < 100) return printf_str("%.1f", r);
  if (r < 1e5) return printf_str("%.0f", r);
  const char* units = "kMGTPE";
  for (int i = 0; i < 6; ++i) {
    r /= 1000;
    if (r < 999.5 || i == 5) return printf_str("%.1f", r) + units[i];
  }
  return "-";  // not reached
}

std::string fmt_loss(double l) {
  if (std::isnan(l)) return "-";
  return printf_str(std::fabs(l) < 1000 ? "%.3f" : "%.4g", l);
}

// The bar of `width` characters, filled as far as step/steps.
std::string bar(int64_t step, int64_t steps, int width) {
  const double f = steps > 0 ? std::clamp(double(step) / double(steps), 0.0, 1.0) : 0.0;
  const int filled = int(f * width);
  return std::string(size_t(filled), '#') + std::string(size_t(width - filled), '.');
}

}  // namespace

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "?";
  // 1e15 s is 30 million years: any larger eta prints as that many days, without overflow.
  const long long t = std::llround(std::min(seconds, 1e15));
  char b[48];
  if (t < 60) std::snprintf(b, sizeof b, "%llds", t);
  else if (t < 3600) std::snprintf(b, sizeof b, "%lldm%02llds", t / 60, t % 60);
  else if (t < 86400) std::snprintf(b, sizeof b, "%lldh%02lldm", t / 3600, (t / 60) % 60);
  else std::snprintf(b, sizeof b, "%lldd%02lldh", t / 86400, (t / 3600) % 24);
  return b;
}

std::string format_bar(const BarState& s, int columns) {
  const size_t budget = size_t(std::max(columns - 1, 1));
  const std::string head = "epoch " + std::to_string(s.epoch) + "/" + std::to_string(s.epochs);
  const std::string count = std::to_string(s.step) + "/" + std::to_string(s.steps);
  const std::string rate = fmt_rate(s.img_per_s) + " img/s", loss = "loss " + fmt_loss(s.loss);
  const std::string lr = "lr " + (std::isnan(s.lr) ? std::string("-") : printf_str("%.3g", s.lr));
  const std::string eta = "eta " + format_duration(s.eta_epoch_s);
  const std::string eta_run = eta + " (run " + format_duration(s.eta_run_s) + ")";
  // The fields after the count, fewer at each level; the last levels have no bar.
  struct Level {
    std::vector<const std::string*> fields;
    bool bar;
  };
  const Level levels[] = {{{&rate, &loss, &lr, &eta_run}, true}, {{&rate, &loss, &lr, &eta}, true},
                          {{&rate, &loss, &eta}, true},           {{&loss, &eta}, true},
                          {{&loss, &eta}, false},                 {{&eta}, false}};
  for (const Level& l : levels) {
    std::string tail = count;
    for (const std::string* f : l.fields) tail += " | " + *f;
    if (!l.bar) {
      if (head.size() + 1 + tail.size() <= budget) return head + " " + tail;
      continue;
    }
    const size_t fixed = head.size() + 2 + 2 + tail.size();  // head + " [" + bar + "] " + tail
    if (fixed + kMinBar > budget) continue;
    const int width = int(std::min<size_t>(budget - fixed, kMaxBar));
    return head + " [" + bar(s.step, s.steps, width) + "] " + tail;
  }
  return (head + " " + count).substr(0, budget);
}

int bar_columns(bool enabled, int fd) {
  if (!enabled || !isatty(fd)) return 0;
  const char* term = std::getenv("TERM");
  if (term && std::strcmp(term, "dumb") == 0) return 0;
  winsize w{};
  return ioctl(fd, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 ? int(w.ws_col) : kDefaultColumns;
}

ProgressBar::ProgressBar(std::FILE* out, int fallback_columns, std::chrono::milliseconds interval)
    : out_(out), fallback_columns_(fallback_columns > 0 ? fallback_columns : kDefaultColumns), interval_(interval) {}

int ProgressBar::columns() const {
  winsize w{};
  return ioctl(fileno(out_), TIOCGWINSZ, &w) == 0 && w.ws_col > 0 ? int(w.ws_col) : fallback_columns_;
}

bool ProgressBar::update(const BarState& s, bool force) {
  const Clock::time_point now = Clock::now();
  if (!force && on_line_ && now - last_draw_ < interval_) return false;
  last_draw_ = now;
  std::fprintf(out_, "\r%s\033[K", format_bar(s, columns()).c_str());
  std::fflush(out_);
  on_line_ = true;
  return true;
}

void ProgressBar::finish() {
  if (!on_line_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  on_line_ = false;
}

}  // namespace rt::train
