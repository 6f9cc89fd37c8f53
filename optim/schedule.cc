#include "optim/schedule.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numbers>
#include <sstream>
#include <stdexcept>

#include "base/error.h"

namespace rt::optim {
namespace {

constexpr LrScheduleKind kKinds[] = {LrScheduleKind::constant, LrScheduleKind::step, LrScheduleKind::multistep,
                                     LrScheduleKind::cosine, LrScheduleKind::poly};

bool finite_non_negative(double x) { return std::isfinite(x) && x >= 0.0; }

}  // namespace

const char* lr_schedule_name(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::constant: return "constant";
    case LrScheduleKind::step: return "step";
    case LrScheduleKind::multistep: return "multistep";
    case LrScheduleKind::cosine: return "cosine";
    case LrScheduleKind::poly: return "poly";
  }
  return "?";
}

LrScheduleKind parse_lr_schedule(const std::string& name) {
  std::string accepted;
  for (LrScheduleKind k : kKinds) {
    if (name == lr_schedule_name(k)) return k;
    accepted += (accepted.empty() ? "" : "|") + std::string(lr_schedule_name(k));
  }
  RT_FAIL("unknown LR schedule '", name, "'; expected one of ", accepted);
}

std::vector<int64_t> parse_milestones(const std::string& text) {
  std::vector<int64_t> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string part = text.substr(begin, comma - begin);
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    RT_CHECK(!part.empty() && used == part.size() && std::isdigit(static_cast<unsigned char>(part[0])),
             "LR milestones '", text, "': '", part, "' is not an epoch number; expected e.g. 30,60,80");
    out.push_back(v);
    if (comma == text.size()) break;
    begin = comma + 1;
  }
  return out;
}

LrSchedule::LrSchedule(double base_lr, int64_t steps_per_epoch, int64_t epochs, LrScheduleOptions opt)
    : base_lr_(base_lr), steps_per_epoch_(steps_per_epoch), epochs_(epochs), opt_(std::move(opt)) {
  RT_CHECK(finite_non_negative(base_lr), "LR schedule: lr must be a finite number >= 0, got ", base_lr);
  RT_CHECK(steps_per_epoch >= 1, "LR schedule: steps_per_epoch must be >= 1, got ", steps_per_epoch);
  RT_CHECK(epochs >= 1, "LR schedule: epochs must be >= 1, got ", epochs);
  RT_CHECK(opt_.warmup_epochs >= 0 && opt_.warmup_epochs <= epochs, "LR schedule: warmup_epochs must be in [0, ",
           epochs, "] (the training's epochs), got ", opt_.warmup_epochs);
  // LinearLR's rule: a start factor of 0 would make the first step a no-op. (MLPerf's
  // warmup, which does start at 0, has no factor.)
  RT_CHECK(opt_.warmup_method == WarmupMethod::mlperf || (opt_.warmup_decay > 0.0 && opt_.warmup_decay <= 1.0),
           "LR schedule: warmup_decay must be in (0, 1], got ", opt_.warmup_decay);
  switch (opt_.kind) {
    case LrScheduleKind::constant: break;
    case LrScheduleKind::step:
      RT_CHECK(opt_.step_size >= 1, "LR schedule step: step_size must be >= 1 epoch, got ", opt_.step_size);
      RT_CHECK(finite_non_negative(opt_.gamma), "LR schedule step: gamma must be a finite number >= 0, got ",
               opt_.gamma);
      break;
    case LrScheduleKind::multistep:
      RT_CHECK(!opt_.milestones.empty(), "LR schedule multistep: needs milestones (epochs, e.g. 30,60,80)");
      for (size_t i = 0; i < opt_.milestones.size(); ++i) {
        RT_CHECK(opt_.milestones[i] >= 1, "LR schedule multistep: milestones must be >= 1 epoch, got ",
                 opt_.milestones[i]);
        RT_CHECK(i == 0 || opt_.milestones[i] > opt_.milestones[i - 1],
                 "LR schedule multistep: milestones must increase, got ", opt_.milestones[i], " after ",
                 opt_.milestones[i - 1]);
      }
      RT_CHECK(finite_non_negative(opt_.gamma), "LR schedule multistep: gamma must be a finite number >= 0, got ",
               opt_.gamma);
      break;
    case LrScheduleKind::cosine:
      RT_CHECK(finite_non_negative(opt_.lr_min) && opt_.lr_min <= base_lr,
               "LR schedule cosine: lr_min must be in [0, lr] = [0, ", base_lr, "], got ", opt_.lr_min);
      break;
    case LrScheduleKind::poly:
      RT_CHECK(std::isfinite(opt_.power) && opt_.power > 0.0, "LR schedule poly: power must be > 0, got ",
               opt_.power);
      RT_CHECK(finite_non_negative(opt_.lr_min) && opt_.lr_min <= base_lr,
               "LR schedule poly: lr_min must be in [0, lr] = [0, ", base_lr, "], got ", opt_.lr_min);
      break;
  }
}

double LrSchedule::lr_at(int64_t step) const {
  RT_CHECK(step >= 0, "LR schedule: step must be >= 0, got ", step);
  const int64_t warmup = warmup_steps();
  if (step < warmup) {
    if (opt_.warmup_method == WarmupMethod::constant) return base_lr_ * opt_.warmup_decay;
    if (opt_.warmup_method == WarmupMethod::mlperf) return base_lr_ * double(step) / double(warmup);
    const double f = opt_.warmup_decay + (1.0 - opt_.warmup_decay) * double(step) / double(warmup);
    return base_lr_ * f;
  }
  return main_lr(step - warmup);
}

double LrSchedule::main_lr(int64_t t) const {
  const int64_t span = total_steps() - warmup_steps();  // T: steps of the main schedule
  // Fraction of the main schedule done, held at 1 past its end (and when it has no steps).
  const double done = span > 0 ? double(std::min(t, span)) / double(span) : 1.0;
  switch (opt_.kind) {
    case LrScheduleKind::constant: return base_lr_;
    case LrScheduleKind::step: return base_lr_ * std::pow(opt_.gamma, double(t / (opt_.step_size * steps_per_epoch_)));
    case LrScheduleKind::multistep: {
      int64_t passed = 0;
      for (int64_t m : opt_.milestones) passed += t >= m * steps_per_epoch_ ? 1 : 0;
      return base_lr_ * std::pow(opt_.gamma, double(passed));
    }
    case LrScheduleKind::cosine:
      return opt_.lr_min + (base_lr_ - opt_.lr_min) * (1.0 + std::cos(std::numbers::pi * done)) / 2.0;
    case LrScheduleKind::poly: {
      if (opt_.warmup_method == WarmupMethod::mlperf) {  // Note [MLPerf schedule]
        if (t == 0 && warmup_steps() > 0) return base_lr_;  // the warmup's rule still holds at its end
        const double d = double(span + 1);
        const double f = 1.0 - double(std::min<int64_t>(std::max<int64_t>(t, 1), span + 1)) / d;
        return opt_.lr_min + (base_lr_ - opt_.lr_min) * std::pow(f, opt_.power);
      }
      return opt_.lr_min + (base_lr_ - opt_.lr_min) * std::pow(1.0 - done, opt_.power);
    }
  }
  return base_lr_;
}

std::string LrSchedule::describe() const {
  std::ostringstream os;
  os << lr_schedule_name(opt_.kind) << " lr " << base_lr_;
  switch (opt_.kind) {
    case LrScheduleKind::constant: break;
    case LrScheduleKind::step: os << ", x" << opt_.gamma << " every " << opt_.step_size << " epochs"; break;
    case LrScheduleKind::multistep: {
      os << ", x" << opt_.gamma << " after epochs";
      for (size_t i = 0; i < opt_.milestones.size(); ++i) os << (i ? "," : " ") << opt_.milestones[i];
      break;
    }
    case LrScheduleKind::cosine: os << " down to " << opt_.lr_min; break;
    case LrScheduleKind::poly: os << " down to " << opt_.lr_min << ", power " << opt_.power; break;
  }
  if (opt_.warmup_epochs > 0)
    os << " (counted from the end of " << opt_.warmup_epochs << " warmup epochs "
       << (opt_.warmup_method == WarmupMethod::mlperf     ? "from 0 (MLPerf's)"
           : opt_.warmup_method == WarmupMethod::constant ? "at lr x " + std::to_string(opt_.warmup_decay)
                                                          : "from lr x " + std::to_string(opt_.warmup_decay))
       << ")";
  os << "; " << epochs_ << " epochs of " << steps_per_epoch_ << " steps";
  return os.str();
}

}  // namespace rt::optim
