#include "train/logging.h"

#include "engine/memory_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace rt::train {
namespace {

std::string fmt_eta(double s) {
  char b[32];
  const long t = long(s);
  std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return b;
}

// "2.3017"; a NaN as `nan_word` ("n/a" for a log window whose steps were all skipped).
std::string fmt_loss(double l, const char* nan_word = "nan") {
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", l);
  return std::isnan(l) ? nan_word : b;
}

// ", 3 with NaN/Inf logits (counted as wrong)" when there are some.
std::string nonfinite_note(int64_t n) {
  return n == 0 ? "" : ", " + std::to_string(n) + " with NaN/Inf logits (counted as wrong)";
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

double LogWindow::mean_loss() const { return steps > skipped ? loss_sum / double(steps - skipped) : NAN; }

TrainLog::TrainLog(const std::string& metrics_path, bool logging_rank, int64_t start_step, int64_t max_steps,
                   bool skip_nonfinite, const LiveOutputs& live)
    : start_step_(start_step), max_steps_(max_steps), skip_nonfinite_(skip_nonfinite) {
  if (!logging_rank) return;
  metrics_.emplace(metrics_path);
  if (live.bar_columns > 0) bar_ = std::make_unique<ProgressBar>(stdout, live.bar_columns);
  if (!live.tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(live.tensorboard_dir);
}

void TrainLog::start(Device device, int64_t images, int64_t steps_per_epoch, int64_t epochs,
                     const std::string& schedule, const std::string& output_dir) {
  if (metrics_)
    std::printf("training on %s: %ld images, %ld steps per epoch, %ld epochs, %s; output %s\n", device.str().c_str(),
                images, steps_per_epoch, epochs, schedule.c_str(), output_dir.c_str());
  if (tensorboard_) std::printf("TensorBoard scalars in %s\n", tensorboard_->path().c_str());
  epochs_ = epochs;
  steps_per_epoch_ = steps_per_epoch;
  t_start_ = t_log_ = t_epoch_ = Clock::now();
}

double TrainLog::run_eta(int64_t step, Clock::time_point now) const {
  if (step <= start_step_) return NAN;
  return seconds(now - t_start_) / double(step - start_step_) * double(max_steps_ - step);
}

void TrainLog::begin_epoch(const Progress& p) {
  epoch_step0_ = p.step;
  epoch_samples0_ = p.samples_seen;
  t_epoch_ = Clock::now();
}

void TrainLog::step(const Progress& p, int64_t step_in_epoch, double lr) {
  if (!bar_) return;
  const bool last = step_in_epoch >= steps_per_epoch_ || p.step >= max_steps_;
  const auto now = Clock::now();
  BarState s;
  s.epoch = p.epoch + 1;
  s.epochs = epochs_;
  s.step = step_in_epoch;
  s.steps = steps_per_epoch_;
  const double dt = seconds(now - t_epoch_);
  if (p.step > epoch_step0_ && dt > 0) {
    s.img_per_s = double(p.samples_seen - epoch_samples0_) * double(world_) / dt;
    s.eta_epoch_s = dt / double(p.step - epoch_step0_) * double(steps_per_epoch_ - step_in_epoch);
  }
  s.loss = last_loss_;
  s.lr = lr;
  s.eta_run_s = run_eta(p.step, now);
  bar_->update(s, last);
}

void TrainLog::end_line() {
  if (bar_) bar_->finish();
}

void TrainLog::train(const Progress& p, double lr, const LogWindow& w, const MixedPrecision& mp) {
  const auto now = Clock::now();
  // Every rank's images (each rank trains as many): the run's throughput.
  const double ips = double(w.samples) * double(world_) / std::max(seconds(now - t_log_), 1e-9);
  const double eta = run_eta(p.step, now);
  t_log_ = now;
  if (!metrics_) return;
  const double mean_loss = w.mean_loss();
  if (!std::isnan(mean_loss)) last_loss_ = mean_loss;
  // On a terminal the bar shows these; a line stays for steps skipped on NaN/Inf.
  if (!bar_ || w.skipped > 0) {
    end_line();
    std::printf("epoch %ld step %ld/%ld  loss %s  lr %.5f  %.1f img/s  eta %s", p.epoch, p.step, max_steps_,
                fmt_loss(mean_loss, "n/a").c_str(), lr, ips, fmt_eta(eta).c_str());
    if (w.skipped > 0) std::printf("  %ld of %ld step(s) skipped on NaN/Inf (--skip-nonfinite)", w.skipped, w.steps);
    if (mp.loss_scaling())
      std::printf("  loss scale %g (%ld step(s) skipped on inf/NaN gradients)", mp.loss_scale(), w.overflow_skips);
    std::printf("\n");
    std::fflush(stdout);
  }
  if (tensorboard_) {
    if (!std::isnan(mean_loss)) tensorboard_->scalar("train/loss", p.step, mean_loss);  // NaN: every step skipped
    tensorboard_->scalar("train/lr", p.step, lr);
    tensorboard_->scalar("train/img_per_s", p.step, ips);
  }
  json::Value m = json::Value::object();
  m.set("type", "train");
  m.set("epoch", p.epoch);
  m.set("step", p.step);
  m.set("loss", mean_loss);  // null when every step was skipped
  m.set("lr", lr);
  m.set("img_per_s", ips);
  m.set("eta_s", eta);
  if (skip_nonfinite_) m.set("skipped_steps", w.skipped);
  if (mp.loss_scaling()) {
    m.set("loss_scale", mp.loss_scale());
    m.set("overflow_skips", w.overflow_skips);
  }
  metrics_->write(m);
}

void TrainLog::eval(const Progress& p, const EvalResult& e, int64_t skipped_train, const EvalResult* ema) {
  if (!metrics_) return;
  end_line();
  std::printf("epoch %ld eval: loss %s  top-1 %.2f%%  top-5 %.2f%%  (%ld images%s)\n", p.epoch,
              fmt_loss(e.loss).c_str(), e.top1, e.top5, e.n, nonfinite_note(e.nonfinite).c_str());
  if (ema)
    std::printf("epoch %ld eval EMA: loss %s  top-1 %.2f%%  top-5 %.2f%%\n", p.epoch, fmt_loss(ema->loss).c_str(),
                ema->top1, ema->top5);
  if (skipped_train > 0 || e.skipped > 0)
    std::printf("epoch %ld: %ld unreadable training image(s) and %ld evaluation image(s) skipped and replaced "
                "(named on stderr; --strict-images makes them errors)\n",
                p.epoch, skipped_train, e.skipped);
  std::fflush(stdout);
  json::Value m = json::Value::object();
  m.set("type", "eval");
  m.set("epoch", p.epoch);
  m.set("step", p.step);
  m.set("loss", e.loss);  // null when NaN
  m.set("top1", e.top1);
  m.set("top5", e.top5);
  m.set("nonfinite_logits", e.nonfinite);
  m.set("skipped_train_images", skipped_train);
  m.set("skipped_eval_images", e.skipped);
  if (ema) {
    m.set("ema_loss", ema->loss);
    m.set("ema_top1", ema->top1);
    m.set("ema_top5", ema->top5);
  }
  metrics_->write(m);
  if (tensorboard_) {
    tensorboard_->scalar("eval/loss", p.step, e.loss);
    tensorboard_->scalar("eval/top1", p.step, e.top1);
    tensorboard_->scalar("eval/top5", p.step, e.top5);
    if (ema) {
      tensorboard_->scalar("eval_ema/loss", p.step, ema->loss);
      tensorboard_->scalar("eval_ema/top1", p.step, ema->top1);
      tensorboard_->scalar("eval_ema/top5", p.step, ema->top5);
    }
  }
}

void TrainLog::memory(const Progress& p, Device device, const AllocatorStats& stats, int rank) {
  end_line();
  std::printf("%sepoch %ld %s\n", world_ > 1 ? ("rank " + std::to_string(rank) + ": ").c_str() : "", p.epoch,
              memory_log_line(device, stats).c_str());
  std::fflush(stdout);
  if (!metrics_) return;
  json::Value m = json::Value::object();
  m.set("type", "memory");
  m.set("epoch", p.epoch);
  m.set("step", p.step);
  m.set("rank", rank);
  for (auto& [k, v] : memory_json(device, stats).as_object()) m.set(k, std::move(v));
  metrics_->write(m);
}

void TrainLog::done(int64_t steps, int64_t skipped_steps, const std::string& weights_path) {
  if (!metrics_) return;
  end_line();
  std::printf("done: %ld steps in %.1f s", steps, seconds(Clock::now() - t_start_));
  if (skipped_steps > 0) std::printf(" (%ld skipped on NaN/Inf by --skip-nonfinite)", skipped_steps);
  std::printf("; weights in %s\n", weights_path.c_str());
}

void TrainLog::parallel(const std::string& describe, int world, int64_t batch, int64_t accum_steps) {
  world_ = world;
  if (!metrics_) return;
  std::printf("%s; global batch %ld = %d process(es) x batch %ld x %ld accumulation step(s); the logged loss is the "
              "mean over every process\n",
              describe.c_str(), int64_t(world) * batch * accum_steps, world, batch, accum_steps);
}

void TrainLog::overlap(const OverlapStats& o) {
  if (!metrics_ || o.steps == 0) return;
  std::printf("all-reduce: %.3f s per step, %.1f%% hidden behind backward (%ld steps)\n",
              o.comm_seconds / double(o.steps), 100.0 * o.fraction(), o.steps);
  json::Value m = json::Value::object();
  m.set("type", "overlap");
  m.set("steps", o.steps);
  m.set("allreduce_s_per_step", o.comm_seconds / double(o.steps));
  m.set("hidden_fraction", o.fraction());
  metrics_->write(m);
}

void TrainLog::phases(const Progress& p, const std::vector<PhaseTimes>& by_rank, double threshold) {
  if (!metrics_) return;
  if (!stragglers_) stragglers_ = std::make_unique<StragglerMonitor>(int(by_rank.size()), threshold);
  for (const std::string& line : stragglers_->observe(by_rank)) {
    end_line();
    std::printf("step %ld: %s\n", p.step, line.c_str());
    std::fflush(stdout);
    json::Value m = json::Value::object();
    m.set("type", "straggler");
    m.set("epoch", p.epoch);
    m.set("step", p.step);
    m.set("message", line);
    metrics_->write(m);
  }
  if (!tensorboard_) return;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    const PhaseTimes& t = by_rank[r];
    if (t.steps == 0) continue;
    const std::string tag = "ranks/rank_" + std::to_string(r) + "/";
    for (int k = 0; k < kPhases; ++k)
      tensorboard_->scalar(tag + phase_name(Phase(k)) + "_ms", p.step, 1e3 * t[Phase(k)] / double(t.steps));
    tensorboard_->scalar(tag + "busy_ms", p.step, 1e3 * t.busy() / double(t.steps));
  }
}

void TrainLog::restart(const Progress& p, int round, const std::string& cause, const std::string& checkpoint) {
  if (!metrics_) return;
  std::printf("restart %d by the launcher (%s): %s\n", round, cause.empty() ? "cause unknown" : cause.c_str(),
              checkpoint.empty() ? "from the start (no checkpoint was saved)"
                                 : ("from " + checkpoint + ", step " + std::to_string(p.step)).c_str());
  std::fflush(stdout);
  json::Value m = json::Value::object();
  m.set("type", "restart");
  m.set("round", int64_t(round));
  m.set("cause", cause);
  m.set("epoch", p.epoch);
  m.set("step", p.step);
  m.set("checkpoint", checkpoint);
  metrics_->write(m);
}

void TrainLog::rank_table() {
  if (!metrics_ || !stragglers_) return;
  const std::string table = stragglers_->table();
  if (table.empty()) return;
  std::printf("%s", table.c_str());
  std::fflush(stdout);
  json::Value m = json::Value::object();
  m.set("type", "ranks");
  const std::vector<PhaseTimes>& totals = stragglers_->totals();
  m.set("steps", totals[0].steps);
  for (int k = 0; k < kPhases; ++k) {
    json::Value ms = json::Value::array();
    for (const PhaseTimes& t : totals) ms.push_back(t.steps > 0 ? 1e3 * t[Phase(k)] / double(t.steps) : 0.0);
    m.set(std::string(phase_name(Phase(k))) + "_ms", std::move(ms));
  }
  metrics_->write(m);
}

void print_eval(const std::string& model, const std::string& dataset, const EvalResult& e, double seconds) {
  std::printf("eval %s on %s: loss %s  top-1 %.2f%%  top-5 %.2f%%  (%ld images%s, %.1f img/s)\n", model.c_str(),
              dataset.c_str(), fmt_loss(e.loss).c_str(), e.top1, e.top5, e.n, nonfinite_note(e.nonfinite).c_str(),
              double(e.n) / seconds);
  if (e.skipped > 0) std::printf("%ld unreadable image(s) skipped and replaced (named on stderr)\n", e.skipped);
}

}  // namespace rt::train
