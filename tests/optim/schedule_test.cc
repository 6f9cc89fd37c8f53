// LR schedules: values at the steps where each rule changes, against closed forms
// written out here, and the errors for bad names and options.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "base/error.h"
#include "optim/schedule.h"

using rt::optim::LrSchedule;
using rt::optim::LrScheduleKind;
using rt::optim::LrScheduleOptions;
using rt::optim::WarmupMethod;

namespace {

// The schedules compute in double with at most a pow or cos per value.
constexpr double kRel = 1e-12;

void check_lr(const LrSchedule& s, int64_t step, double want) {
  const double got = s.lr_at(step);
  CHECK_MESSAGE(std::abs(got - want) <= kRel * std::abs(want) + 1e-300, "step ", step, ": got ", got, ", want ",
                want);
}

LrScheduleOptions opts(LrScheduleKind kind, int64_t warmup_epochs = 0) {
  LrScheduleOptions o;
  o.kind = kind;
  o.warmup_epochs = warmup_epochs;
  return o;
}

}  // namespace

TEST_CASE("parse: every CLI name, and an error listing them") {
  using rt::optim::parse_lr_schedule;
  CHECK(parse_lr_schedule("constant") == LrScheduleKind::constant);
  CHECK(parse_lr_schedule("step") == LrScheduleKind::step);
  CHECK(parse_lr_schedule("multistep") == LrScheduleKind::multistep);
  CHECK(parse_lr_schedule("cosine") == LrScheduleKind::cosine);
  CHECK(parse_lr_schedule("poly") == LrScheduleKind::poly);
  for (LrScheduleKind k : {LrScheduleKind::constant, LrScheduleKind::step, LrScheduleKind::multistep,
                           LrScheduleKind::cosine, LrScheduleKind::poly})
    CHECK(parse_lr_schedule(rt::optim::lr_schedule_name(k)) == k);
  CHECK_THROWS_WITH_AS(parse_lr_schedule("cosineannealinglr"),
                       "unknown LR schedule 'cosineannealinglr'; expected one of constant|step|multistep|cosine|poly",
                       rt::Error);
  CHECK_THROWS_WITH_AS(parse_lr_schedule(""), doctest::Contains("unknown LR schedule ''"), rt::Error);
  CHECK_THROWS_WITH_AS(parse_lr_schedule("Cosine"), doctest::Contains("expected one of"), rt::Error);
}

TEST_CASE("parse_milestones") {
  using rt::optim::parse_milestones;
  CHECK(parse_milestones("30,60,80") == std::vector<int64_t>{30, 60, 80});
  CHECK(parse_milestones("7") == std::vector<int64_t>{7});
  for (const char* bad : {"", "30,,60", "30,", "x", "30;60", "-5", "3.5", " 30"})
    CHECK_THROWS_WITH_AS(parse_milestones(bad), doctest::Contains("is not an epoch number"), rt::Error);
}

TEST_CASE("constant, with and without warmup") {
  const LrSchedule s(0.1, 10, 5, opts(LrScheduleKind::constant));
  CHECK(s.total_steps() == 50);
  CHECK(s.warmup_steps() == 0);
  for (int64_t step : {0, 1, 25, 49, 50, 1000}) check_lr(s, step, 0.1);
}

TEST_CASE("linear warmup: from lr * warmup_decay to lr over warmup_epochs * steps_per_epoch steps") {
  LrScheduleOptions o = opts(LrScheduleKind::constant, 2);
  o.warmup_decay = 0.01;
  const LrSchedule s(0.4, 100, 10, o);  // 200 warmup steps
  CHECK(s.warmup_steps() == 200);
  check_lr(s, 0, 0.4 * 0.01);                            // the first step: lr * decay
  check_lr(s, 1, 0.4 * (0.01 + 0.99 * 1.0 / 200));
  check_lr(s, 100, 0.4 * (0.01 + 0.99 * 0.5));            // halfway
  check_lr(s, 199, 0.4 * (0.01 + 0.99 * 199.0 / 200));    // the last warmup step
  check_lr(s, 200, 0.4);                                   // the main schedule
  // Rising strictly through the warmup.
  for (int64_t t = 1; t <= 200; ++t) CHECK(s.lr_at(t) > s.lr_at(t - 1));

  LrScheduleOptions none = o;
  none.warmup_decay = 1.0;  // a factor of 1: no warmup effect
  const LrSchedule flat(0.4, 100, 10, none);
  for (int64_t step : {0, 50, 199, 200}) check_lr(flat, step, 0.4);
}

TEST_CASE("constant warmup: lr * warmup_decay for warmup_epochs, then the main schedule from its start") {
  LrScheduleOptions o = opts(LrScheduleKind::cosine, 2);
  o.warmup_method = WarmupMethod::constant;
  o.warmup_decay = 0.1;
  const LrSchedule s(0.4, 10, 6, o);  // 20 warmup steps, then 40 cosine steps
  for (int64_t step : {0, 1, 10, 19}) check_lr(s, step, 0.04);
  // At each epoch's start, torchvision's per-epoch ConstantLR(factor 0.1, total_iters 2)
  // then CosineAnnealingLR(T_max 4) under SequentialLR(milestones [2]): 0.04, 0.04, then
  // 0.4 * (1 + cos(pi k / 4)) / 2 for k = 0..3.
  const double want[] = {0.04, 0.04, 0.4, 0.2 * (1 + std::cos(std::numbers::pi / 4)), 0.2,
                         0.2 * (1 + std::cos(3 * std::numbers::pi / 4))};
  for (int64_t e = 0; e < 6; ++e) check_lr(s, e * 10, want[e]);
  const std::string d = s.describe();
  CHECK_MESSAGE(d.find("2 warmup epochs at lr x 0.1") != std::string::npos, d);
}

TEST_CASE("step: gamma every step_size epochs, counted from the end of the warmup") {
  LrScheduleOptions o = opts(LrScheduleKind::step);
  o.step_size = 3;
  o.gamma = 0.1;
  const LrSchedule s(1.0, 10, 10, o);
  check_lr(s, 0, 1.0);
  check_lr(s, 29, 1.0);    // the last step of epoch 2
  check_lr(s, 30, 0.1);    // epoch 3
  check_lr(s, 59, 0.1);
  check_lr(s, 60, 0.01);
  check_lr(s, 99, 1e-3);   // epoch 9
  check_lr(s, 120, 1e-4);  // past the end the rule continues

  o.warmup_epochs = 2;
  const LrSchedule w(1.0, 10, 10, o);
  check_lr(w, 19, 0.01 + 0.99 * 19.0 / 20);
  check_lr(w, 20, 1.0);
  check_lr(w, 49, 1.0);  // 29 steps after the warmup
  check_lr(w, 50, 0.1);  // epoch 5 = 2 warmup + 3
}

TEST_CASE("multistep: gamma at each milestone (epochs after the warmup)") {
  LrScheduleOptions o = opts(LrScheduleKind::multistep);
  o.milestones = {2, 5, 7};
  o.gamma = 0.5;
  const LrSchedule s(0.8, 4, 10, o);
  check_lr(s, 0, 0.8);
  check_lr(s, 7, 0.8);
  check_lr(s, 8, 0.4);   // epoch 2
  check_lr(s, 19, 0.4);
  check_lr(s, 20, 0.2);  // epoch 5
  check_lr(s, 27, 0.2);
  check_lr(s, 28, 0.1);  // epoch 7
  check_lr(s, 39, 0.1);

  o.warmup_epochs = 1;
  const LrSchedule w(0.8, 4, 10, o);
  check_lr(w, 0, 0.8 * 0.01);
  check_lr(w, 4, 0.8);
  check_lr(w, 11, 0.8);
  check_lr(w, 12, 0.4);  // 1 + 2 epochs
}

TEST_CASE("cosine: from lr to lr_min over the steps after the warmup") {
  LrScheduleOptions o = opts(LrScheduleKind::cosine, 1);
  o.lr_min = 0.001;
  const double lr = 0.5;
  const LrSchedule s(lr, 10, 5, o);  // 10 warmup steps, T = 40 cosine steps
  const double T = 40;
  auto cosine = [&](double t) { return o.lr_min + (lr - o.lr_min) * (1 + std::cos(std::numbers::pi * t / T)) / 2; };
  check_lr(s, 9, lr * (0.01 + 0.99 * 9.0 / 10));
  check_lr(s, 10, lr);                        // t = 0: the full lr
  check_lr(s, 11, cosine(1));
  check_lr(s, 30, (lr + o.lr_min) / 2);       // t = T/2: the midpoint
  check_lr(s, 40, cosine(30));
  check_lr(s, 49, cosine(39));                // the last step
  check_lr(s, 50, o.lr_min);                  // t = T
  check_lr(s, 500, o.lr_min);                 // held past the end
  for (int64_t t = 11; t <= 50; ++t) CHECK(s.lr_at(t) < s.lr_at(t - 1));

  // Warmup over every epoch: nothing left to anneal; the end is lr_min.
  LrScheduleOptions all = opts(LrScheduleKind::cosine, 5);
  const LrSchedule a(lr, 10, 5, all);
  check_lr(a, 49, lr * (0.01 + 0.99 * 49.0 / 50));
  check_lr(a, 50, 0.0);
}

TEST_CASE("poly: lr * (1 - t/T)^power") {
  LrScheduleOptions o = opts(LrScheduleKind::poly);
  o.power = 0.9;
  const LrSchedule s(0.2, 5, 4, o);  // T = 20
  check_lr(s, 0, 0.2);
  check_lr(s, 5, 0.2 * std::pow(0.75, 0.9));
  check_lr(s, 10, 0.2 * std::pow(0.5, 0.9));
  check_lr(s, 19, 0.2 * std::pow(0.05, 0.9));
  check_lr(s, 20, 0.0);
  check_lr(s, 21, 0.0);

  o.power = 1.0;
  o.warmup_epochs = 2;
  const LrSchedule w(0.2, 5, 4, o);  // 10 warmup steps, T = 10
  check_lr(w, 10, 0.2);
  check_lr(w, 15, 0.1);  // linear: halfway
}

TEST_CASE("poly ends at lr_min") {
  LrScheduleOptions o = opts(LrScheduleKind::poly);
  o.power = 2.0;
  o.lr_min = 0.01;
  const LrSchedule s(0.2, 5, 4, o);  // T = 20
  check_lr(s, 0, 0.2);
  check_lr(s, 10, 0.01 + 0.19 * 0.25);
  check_lr(s, 20, 0.01);
}

// The reference's poly_rate_schedule (Note [MLPerf schedule]) written out in its own terms
// (current_epoch = step / steps_per_epoch; wrate while current_epoch <= w_epochs;
// polynomial_decay(plr, max(1, step - w_steps), train_steps - w_steps + 1, end_lr, power)).
TEST_CASE("mlperf warmup and poly: the MLPerf ResNet reference's schedule") {
  const double plr = 10.0, end_lr = 1e-4;
  const int64_t per_epoch = 7, epochs = 6, w_epochs = 2;
  LrScheduleOptions o = opts(LrScheduleKind::poly, w_epochs);
  o.warmup_method = WarmupMethod::mlperf;
  o.power = 2.0;
  o.lr_min = end_lr;
  const LrSchedule s(plr, per_epoch, epochs, o);
  const int64_t train_steps = per_epoch * epochs, w_steps = per_epoch * w_epochs;
  for (int64_t step = 0; step < train_steps + 3; ++step) {
    const double current_epoch = double(step) / double(per_epoch);
    double want;
    if (current_epoch <= double(w_epochs)) {  // the reference's tf.where: the warmup's end included
      want = plr * current_epoch / double(w_epochs);
    } else {
      const double decay_steps = double(train_steps - w_steps + 1);
      const double g = std::min(double(std::max<int64_t>(1, step - w_steps)), decay_steps);
      want = (plr - end_lr) * std::pow(1.0 - g / decay_steps, 2.0) + end_lr;
    }
    check_lr(s, step, want);
  }
  CHECK(s.lr_at(0) == 0.0);  // MLPerf's first step has lr 0
  const std::string d = s.describe();
  CHECK_MESSAGE(d.find("MLPerf") != std::string::npos, d);
}

TEST_CASE("describe names the rule and the warmup") {
  LrScheduleOptions o = opts(LrScheduleKind::multistep, 5);
  o.milestones = {30, 60};
  const std::string d = LrSchedule(0.1, 100, 90, o).describe();
  CHECK_MESSAGE(d.find("multistep") != std::string::npos, d);
  CHECK_MESSAGE(d.find("30,60") != std::string::npos, d);
  CHECK_MESSAGE(d.find("5 warmup epochs") != std::string::npos, d);
}

TEST_CASE("invalid schedules are refused with the option's name") {
  auto make = [](auto edit, double lr = 0.1, int64_t spe = 10, int64_t epochs = 5) {
    LrScheduleOptions o;
    edit(o);
    return LrSchedule(lr, spe, epochs, o);
  };
  auto nothing = [](LrScheduleOptions&) {};
  CHECK_THROWS_WITH_AS(make(nothing, -0.1), doctest::Contains("lr must be a finite number >= 0, got -0.1"), rt::Error);
  CHECK_THROWS_WITH_AS(make(nothing, 0.1, 0), doctest::Contains("steps_per_epoch must be >= 1, got 0"), rt::Error);
  CHECK_THROWS_WITH_AS(make(nothing, 0.1, 10, 0), doctest::Contains("epochs must be >= 1, got 0"), rt::Error);
  CHECK_THROWS_WITH_AS(make([](LrScheduleOptions& o) { o.warmup_epochs = 6; }),
                       doctest::Contains("warmup_epochs must be in [0, 5]"), rt::Error);
  CHECK_THROWS_WITH_AS(make([](LrScheduleOptions& o) { o.warmup_epochs = -1; }),
                       doctest::Contains("warmup_epochs must be in"), rt::Error);
  CHECK_THROWS_WITH_AS(make([](LrScheduleOptions& o) { o.warmup_decay = 0.0; }),
                       doctest::Contains("warmup_decay must be in (0, 1], got 0"), rt::Error);
  CHECK_THROWS_WITH_AS(make([](LrScheduleOptions& o) { o.kind = LrScheduleKind::step, o.step_size = 0; }),
                       doctest::Contains("step_size must be >= 1 epoch, got 0"), rt::Error);
  CHECK_THROWS_WITH_AS(make([](LrScheduleOptions& o) { o.kind = LrScheduleKind::step, o.gamma = -1; }),
                       doctest::Contains("gamma must be"), rt::Error);
  CHECK_THROWS_WITH_AS(make([](LrScheduleOptions& o) { o.kind = LrScheduleKind::multistep; }),
                       doctest::Contains("multistep: needs milestones"), rt::Error);
  CHECK_THROWS_WITH_AS(make([](LrScheduleOptions& o) { o.kind = LrScheduleKind::multistep, o.milestones = {3, 3}; }),
                       doctest::Contains("milestones must increase, got 3 after 3"), rt::Error);
  CHECK_THROWS_WITH_AS(make([](LrScheduleOptions& o) { o.kind = LrScheduleKind::multistep, o.milestones = {0, 3}; }),
                       doctest::Contains("milestones must be >= 1 epoch, got 0"), rt::Error);
  CHECK_THROWS_WITH_AS(make([](LrScheduleOptions& o) { o.kind = LrScheduleKind::cosine, o.lr_min = 0.2; }),
                       doctest::Contains("lr_min must be in [0, lr] = [0, 0.1], got 0.2"), rt::Error);
  CHECK_THROWS_WITH_AS(make([](LrScheduleOptions& o) { o.kind = LrScheduleKind::poly, o.power = 0; }),
                       doctest::Contains("power must be > 0"), rt::Error);
  // Options of other kinds are not checked: the defaults of all of them coexist.
  CHECK_NOTHROW(make([](LrScheduleOptions& o) { o.kind = LrScheduleKind::cosine, o.step_size = 0; }));
  CHECK_THROWS_WITH_AS(LrSchedule(0.1, 10, 5).lr_at(-1), doctest::Contains("step must be >= 0, got -1"), rt::Error);
}
