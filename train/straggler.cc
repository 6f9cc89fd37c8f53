#include "train/straggler.h"

#include <algorithm>
#include <cstdio>

#include "base/error.h"
#include "distributed/fault.h"

namespace rt::train {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::data:
      return "data";
    case Phase::forward:
      return "forward";
    case Phase::backward:
      return "backward";
    case Phase::comm:
      return "comm";
    case Phase::optimizer:
      return "optimizer";
    case Phase::other:
      return "other";
  }
  return "?";
}

double PhaseTimes::total() const {
  double t = 0;
  for (double s : seconds) t += s;
  return t;
}

PhaseTimes& PhaseTimes::operator+=(const PhaseTimes& o) {
  for (int p = 0; p < kPhases; ++p) seconds[size_t(p)] += o.seconds[size_t(p)];
  steps += o.steps;
  return *this;
}

void PhaseTimes::pack(double* out) const {
  for (int p = 0; p < kPhases; ++p) out[p] = seconds[size_t(p)];
  out[kPhases] = double(steps);
}

PhaseTimes PhaseTimes::unpack(const double* in) {
  PhaseTimes t;
  for (int p = 0; p < kPhases; ++p) t.seconds[size_t(p)] = in[p];
  t.steps = int64_t(in[kPhases]);
  return t;
}

PhaseScope::PhaseScope(PhaseTimes& times, Phase p, int rank)
    : times_(times), phase_(p), start_(std::chrono::steady_clock::now()) {
  dist::inject_phase_delay(rank, phase_name(p));
}

PhaseScope::~PhaseScope() {
  times_[phase_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

PhaseTimes with_device_clock(const PhaseTimes& host, const PhaseTimes& device) {
  if (device.steps == 0 || host.steps == 0) return host;
  const double scale = double(host.steps) / double(device.steps);
  PhaseTimes t;
  t.steps = host.steps;
  t[Phase::data] = host[Phase::data];
  t[Phase::forward] = std::max(0.0, device[Phase::forward] * scale - host[Phase::data]);
  t[Phase::backward] = device[Phase::backward] * scale;
  t[Phase::comm] = device[Phase::comm] * scale;
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

// Milliseconds per step of phase `p` (busy time when p is null) for each rank.
std::vector<double> per_step_ms(const std::vector<PhaseTimes>& by_rank, const Phase* p) {
  std::vector<double> v;
  for (const PhaseTimes& t : by_rank) {
    const double s = p ? t[*p] : t.busy();
    v.push_back(t.steps > 0 ? 1e3 * s / double(t.steps) : 0.0);
  }
  return v;
}

// The median of `v` without its element `r`: what rank r is compared with (with two ranks, the other one).
double median_of_others(const std::vector<double>& v, int r) {
  std::vector<double> others;
  for (size_t q = 0; q < v.size(); ++q)
    if (int(q) != r) others.push_back(v[q]);
  return median(others);
}

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

// "rank R is X% slower than the other ranks' median over the last S steps: PHASE A ms vs B ms per step".
std::string slow_line(int r, const std::vector<PhaseTimes>& sums) {
  const std::vector<double> busy = per_step_ms(sums, nullptr);
  const double med = median_of_others(busy, r);
  Phase worst = Phase::data;
  double worst_gap = -1, mine = 0, theirs = 0;
  for (int k = 0; k < kPhases; ++k) {
    const Phase p = Phase(k);
    if (p == Phase::comm) continue;  // the fast ranks' wait, not a cause
    const std::vector<double> ms = per_step_ms(sums, &p);
    const double m = median_of_others(ms, r), gap = ms[size_t(r)] - m;
    if (gap > worst_gap) {
      worst_gap = gap;
      worst = p;
      mine = ms[size_t(r)];
      theirs = m;
    }
  }
  return "rank " + std::to_string(r) + " is " + fmt("%.0f", 100.0 * (busy[size_t(r)] / med - 1.0)) +
         "% slower than the other ranks' median over the last " + std::to_string(sums[size_t(r)].steps) +
         " steps: " + phase_name(worst) + fmt(" %.1f ms vs %.1f ms per step", mine, theirs) +
         fmt(" (busy %.1f ms vs %.1f ms)", busy[size_t(r)], med);
}

}  // namespace

StragglerMonitor::StragglerMonitor(int world, double threshold)
    : world_(world),
      threshold_(threshold),
      streak_(size_t(world), 0),
      in_streak_(size_t(world), std::vector<PhaseTimes>(size_t(world))),
      totals_(size_t(world)) {
  RT_CHECK(threshold > 0, "--straggler-threshold must be > 0, got ", threshold);
}

std::vector<std::string> StragglerMonitor::observe(const std::vector<PhaseTimes>& by_rank) {
  RT_CHECK(int(by_rank.size()) == world_, "StragglerMonitor: ", by_rank.size(), " ranks' times for a world of ",
           world_);
  for (int r = 0; r < world_; ++r) totals_[size_t(r)] += by_rank[size_t(r)];
  std::vector<std::string> lines;
  if (world_ < 2) return lines;
  const std::vector<double> busy = per_step_ms(by_rank, nullptr);
  for (int r = 0; r < world_; ++r) {
    int& streak = streak_[size_t(r)];
    std::vector<PhaseTimes>& sums = in_streak_[size_t(r)];
    const double med = median_of_others(busy, r);
    if (med > 0 && busy[size_t(r)] > (1.0 + threshold_) * med) {
      if (streak == 0) sums.assign(size_t(world_), PhaseTimes{});
      ++streak;
      for (int q = 0; q < world_; ++q) sums[size_t(q)] += by_rank[size_t(q)];
      if (streak % kStragglerWindows == 0) lines.push_back(slow_line(r, sums));
    } else {
      if (streak >= kStragglerWindows)
        lines.push_back(
            "rank " + std::to_string(r) + " is no longer slower than the other ranks' median by more than " +
            fmt("%.0f", 100.0 * threshold_) + "% (it was for " + std::to_string(sums[size_t(r)].steps) + " steps)");
      streak = 0;
    }
  }
  return lines;
}

std::string StragglerMonitor::table() const {
  if (totals_.empty() || totals_[0].steps == 0) return "";
  const std::vector<double> busy = per_step_ms(totals_, nullptr);
  std::string out = "per-rank step time (ms per step over " + std::to_string(totals_[0].steps) + " steps):\n";
  out += "  rank";
  for (int k = 0; k < kPhases; ++k) {
    const std::string name = phase_name(Phase(k));
    out += std::string(10 - name.size(), ' ') + name;
  }
  out += "      busy  vs others\n";
  for (int r = 0; r < world_; ++r) {
    out += fmt("  %4.0f", r);
    for (int k = 0; k < kPhases; ++k) {
      const Phase p = Phase(k);
      out += fmt(" %9.1f", per_step_ms(totals_, &p)[size_t(r)]);
    }
    const double med = median_of_others(busy, r);
    out += fmt(" %9.1f  %+8.0f%%\n", busy[size_t(r)], med > 0 ? 100.0 * (busy[size_t(r)] / med - 1.0) : 0.0);
  }
  return out;
}

}  // namespace rt::train
