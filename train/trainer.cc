// The training loop: epochs of optimizer steps from where the run stands
// (Note [Exact resume], train/resume.h), a log line every --print-freq steps, an evaluation
// at the end of each epoch, a checkpoint after it (and every --checkpoint-every steps), and
// on a signal a last checkpoint (Note [Interrupts], train/interrupt.h).
#include "train/trainer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <omp.h>
#include <unistd.h>

#include "base/usage_error.h"
#include "distributed/flight_recorder.h"
#include "engine/profiler.h"
#include "profile/session.h"
#include "train/data_parallel.h"
#include "train/evaluate.h"
#include "train/interrupt.h"
#include "train/logging.h"
#include "train/output_dir.h"
#include "train/rank_log.h"
#include "train/resume.h"
#include "train/setup.h"
#include "train/step.h"

namespace rt::train {
namespace {

namespace fs = std::filesystem;

// The model with --init-weights loaded, on the device, in training mode.
nn::Module& ready_to_train(const TrainConfig& cfg, const Setup& s) {
  const MemoryTagScope tag(MemoryTag::parameters);  // the copies on the device, too
  load_init_weights(cfg, *s.model);
  s.model->to(s.device, s.format);
  s.model->train();
  return *s.model;
}

// The flags the checkpoint records, with the precision auto chose (resuming must choose the
// same), the CPU threads the math runs on (--threads 0 is "all cores": Note [Exact resume]
// holds for a thread count, so a resume on a machine with other cores must be caught) and
// the number of processes (Note [Resume with another world size]).
// Beside them: the steps per epoch (a resume on another training set says what changes) and
// the model's architecture (Note [Settings before tensors]).
std::map<std::string, std::string> flags_to_record(const TrainConfig& cfg, const Setup& s, int world,
                                                   int64_t steps_per_epoch) {
  std::map<std::string, std::string> flags = cfg.recorded_flags;
  flags["precision"] = precision_name(s.precision);
  if (!s.device.is_cuda()) flags["threads"] = std::to_string(omp_get_max_threads());  // set_up() set it
  flags["world-size"] = std::to_string(world);
  flags["steps-per-epoch"] = std::to_string(steps_per_epoch);
  for (const auto& [k, v] : architecture_record(cfg.model.name, s.model_options)) flags[k] = v;
  return flags;
}

// The run's directory: rank 0 opens it (fs checks, another run's files refused, stale
// temporaries removed) and every rank uses the same one.
fs::path run_dir(const TrainConfig& cfg, ParallelContext& par, OutputDirLock& lock) {
  const std::string name = cfg.data.dataset + "-" + cfg.model.name;
  if (par.world_size() == 1) {
    const fs::path dir = open_output_dir(cfg.output, name, lock);
    if (par.is_data_parallel()) fs::create_directories(dir / "logs");  // rank 0 of 1 under a launcher
    return dir;
  }
  std::string dir;
  if (par.is_logging_rank()) dir = open_output_dir(cfg.output, name, lock).string();
  dir = par.agree("output-dir", dir);
  fs::create_directories(fs::path(dir) / "logs");
  return dir;
}

// metrics.jsonl, without the records this run writes again (Note [Metrics of a resumed run]
// in train/metrics.h): the logging rank moves them to logs/metrics-replaced.jsonl.
std::string metrics_file(const fs::path& dir, const Progress& p, const ParallelContext& par) {
  const fs::path path = dir / "metrics.jsonl";
  if (!par.is_logging_rank() || !fs::exists(path)) return path.string();
  fs::create_directories(dir / "logs");
  const fs::path replaced = dir / "logs" / "metrics-replaced.jsonl";
  const int64_t moved = set_aside_redone_records(path.string(), replaced.string(), p.epoch, p.step);
  if (moved > 0)
    std::printf("%s: %ld record(s) of the steps after step %ld (this run logs them again) moved to %s\n",
                path.c_str(), long(moved), long(p.step), replaced.c_str());
  return path.string();
}

// The logging rank's progress bar and TensorBoard events. The bar's terminal is the one
// stdout was before the rank log made it a pipe (data parallel).
LiveOutputs live_outputs(const TrainConfig& cfg, const ParallelContext& par, const fs::path& dir, const RankLog* log) {
  LiveOutputs o;
  if (!par.is_logging_rank()) return o;
  o.bar_columns = bar_columns(cfg.output.progress_bar, log ? log->original_stdout() : STDOUT_FILENO);
  const std::string& tb = cfg.output.tensorboard_dir;
  if (cfg.output.tensorboard) o.tensorboard_dir = tb.empty() ? (dir / "tensorboard").string() : tb;
  return o;
}

// Data parallel: each rank's output copied to <dir>/logs/rank-K.log (Note [Whole rank logs]).
RankLog* open_rank_log(RankLog* log, const fs::path& dir, const ParallelContext& par) {
  if (log) log->open((dir / "logs" / ("rank-" + std::to_string(par.rank()) + ".log")).string());
  return log;
}

// Note [Same flags on every rank]
// Ranks that train with different trajectory flags (model, data, batch, optimizer,
// schedule, seed, ...: Note [Trajectory flags]) would average gradients of different
// computations, and ranks with different communication flags issue different collectives
// (another bucket size: buffers of other sizes, which Gloo stops on with an assertion;
// another --allreduce: other messages, and both ranks wait out --timeout). Each rank
// compares its flags with rank 0's before the first collective of training; one that
// differs stops naming the flag (the launcher reports that rank). Which flags: the
// trajectory's but --threads (a rank's CPU math is its own computation whatever its thread
// count), and the communication flags; the command line's rows say (Note [One row per flag]).
void check_same_flags(ParallelContext& par, const std::map<std::string, std::string>& flags,
                      const std::set<std::string>& names) {
  if (par.world_size() == 1) return;
  std::string mine;
  for (const std::string& k : names)
    if (flags.count(k)) mine += k + "=" + flags.at(k) + "\n";
  const std::string theirs = par.agree("trajectory-flags", mine);
  if (theirs == mine) return;
  std::map<std::string, std::string> r0;
  std::istringstream in(theirs);
  for (std::string line; std::getline(in, line);) r0[line.substr(0, line.find('='))] = line.substr(line.find('=') + 1);
  for (const std::string& k : names) {
    const std::string a = flags.count(k) ? flags.at(k) : "(unset)", b = r0.count(k) ? r0.at(k) : "(unset)";
    if (a != b)
      throw UsageError("data parallel: rank " + std::to_string(par.rank()) + " runs with --" + k + " " + a +
                       " but rank 0 with --" + k + " " + b +
                       ": every rank must run with the same training flags (start them with the same command)");
  }
}

// The model's copies on every rank made rank 0's, and its gradients hooked (after resuming,
// before the step snapshots the state for --skip-nonfinite).
bool attach(ParallelContext& par, nn::Module& model, MixedPrecision& mp,
            const std::map<std::string, std::string>& flags, const std::set<std::string>& same,
            const fs::path& run_dir) {
  check_same_flags(par, flags, same);
  par.attach(model, mp.compute_copies(), run_dir.string());
  return true;
}

// --model-ema: the EMA's model (a second model of the same architecture, on the device) and
// the average kept in it, made with torchvision's decay adjustment (optim/ema.h).
struct Ema {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<MixedPrecision> mp;  // its evaluation in the run's precision
  std::unique_ptr<optim::ModelEma> average;
};

Ema make_ema(const TrainConfig& cfg, const Setup& s, nn::Module& model, const ParallelContext& par) {
  Ema e;
  if (!cfg.ema.enabled) return e;
  e.model = make_model_like(cfg, s);
  e.model->eval();
  e.mp = std::make_unique<MixedPrecision>(*e.model, mixed_precision_options(s.precision));
  optim::ModelEmaOptions o;
  o.decay = optim::ema_decay_for(cfg.ema.decay, par.world_size(), cfg.loader.batch_size, cfg.ema.steps,
                                 cfg.loop.epochs);
  o.steps = cfg.ema.steps;
  o.warmup_epochs = cfg.lr_schedule.warmup_epochs;
  e.average = std::make_unique<optim::ModelEma>(model.state_dict(), e.model->state_dict(), o);
  return e;
}

// The members are declared in the order they are set up.
class Trainer {
 public:
  Trainer(const TrainConfig& cfg, ParallelContext& par, RankLog* log);
  int run();

 private:
  bool train_epoch();
  bool end_epoch();
  void log_window();
  void checkpoint();
  int stop_signal() const;
  void note_signals(const std::vector<double>& by_rank);
  int stopped_by_rank_ = -1;  // the rank whose signal stops the run (Note [Stopping together])
  int agreed_signal_ = 0;     // and its signal

  const TrainConfig& cfg_;
  ParallelContext& par_;
  Setup s_;
  OutputDirLock dir_lock_;  // Note [One run per directory]
  fs::path dir_, ckpt_, weights_, ema_weights_;
  LiveOutputs live_;
  RankLog* rank_log_;
  nn::Module& model_;
  std::unique_ptr<optim::Optimizer> opt_;
  MixedPrecision mp_;
  Ema ema_;  // --model-ema
  TrainData data_;
  optim::LrSchedule schedule_;
  std::map<std::string, std::string> flags_;
  Progress p_;
  bool attached_;
  int64_t max_steps_;
  TrainLog log_;
  InterruptHandler interrupt_;
  TrainStep step_;
  LogWindow window_;
  prof::ProfileSession profile_;  // --profile-steps (profile/session.h)
  int64_t skipped_steps_ = 0;  // by --skip-nonfinite, in this process
  int64_t overflow_skips_logged_ = 0;  // the loss scaler's skipped steps up to the last log line
};

Trainer::Trainer(const TrainConfig& cfg, ParallelContext& par, RankLog* log)
    : cfg_(cfg),
      par_(par),
      s_(set_up(cfg, /*training=*/true)),
      dir_(run_dir(cfg, par, dir_lock_)),
      ckpt_(dir_ / "checkpoint.safetensors"),
      weights_(dir_ / "model.safetensors"),
      ema_weights_(dir_ / "model_ema.safetensors"),
      live_(live_outputs(cfg, par, dir_, log)),
      rank_log_(open_rank_log(log, dir_, par)),
      model_(ready_to_train(cfg, s_)),
      opt_(make_optimizer(cfg.optimizer, model_)),
      mp_([&] {
        const MemoryTagScope tag(MemoryTag::parameters);  // the compute copies
        return MixedPrecision(model_, mixed_precision_options(s_.precision));
      }()),
      ema_(make_ema(cfg, s_, model_, par)),
      data_(open_train_data(cfg, s_, mp_.input_dtype(), par)),
      schedule_(cfg.optimizer.lr, data_.steps_per_epoch, cfg.loop.epochs, cfg.lr_schedule),
      flags_(flags_to_record(cfg, s_, par.world_size(), data_.steps_per_epoch)),
      p_(cfg.output.resume.empty()
             ? Progress{}
             : resume(cfg.output.resume, model_, *opt_, mp_, flags_, cfg.trajectory_flags, data_.steps_per_epoch,
                      ema_.average.get())),
      attached_(attach(par, model_, mp_, flags_, cfg.same_on_every_rank_flags, dir_)),
      max_steps_(cfg.loop.max_steps > 0 ? cfg.loop.max_steps : cfg.loop.epochs * data_.steps_per_epoch),
      log_(metrics_file(dir_, p_, par), par.is_logging_rank(), p_.step, max_steps_, cfg.loop.skip_nonfinite,
           live_),
      step_(model_, *opt_, mp_, par, cfg.loop, cfg.label_smoothing, s_.device, step_options(cfg)),
      window_(p_.step + 1),
      profile_(cfg.profile, s_.device, s_.precision == Precision::tf32,
               cfg.profile_dir.empty() ? dir_.string() : cfg.profile_dir, par.rank(), par.world_size()) {
  nn::name_modules_for_profiling(model_);  // layer paths in profiles and NVTX ranges
}

int Trainer::run() {
  log_.start(s_.device, s_.train_set->size(), data_.steps_per_epoch, cfg_.loop.epochs, schedule_.describe(),
             dir_.string());
  if (par_.is_data_parallel())
    log_.parallel(par_.describe(), par_.world_size(), cfg_.loader.batch_size, cfg_.loop.accum_steps);
  if (par_.restart_round() > 0) log_.restart(p_, par_.restart_round(), par_.restart_cause(), cfg_.output.resume);
  while (p_.step < max_steps_ && p_.epoch < cfg_.loop.epochs) {
    if (!train_epoch()) break;
    const bool epoch_done = p_.batch + cfg_.loop.accum_steps > data_.batches_per_epoch;
    if (epoch_done && !end_epoch()) break;
    if (par_.world_size() > 1 && epoch_done) {  // an epoch's end is a point to agree (Note [Stopping together])
      std::vector<double> by_rank(size_t(par_.world_size()), 0.0);
      by_rank[size_t(par_.rank())] = interrupt_.signal();
      par_.sum_over_ranks(by_rank);
      note_signals(by_rank);
      if (agreed_signal_) break;  // the checkpoint is saved below
    }
    checkpoint();
  }
  if (const int sig = stop_signal()) {  // also one that came after the last step (one process)
    checkpoint();
    par_.finish();  // every rank stopped here, with the same weights, before any leaves
    log_.end_line();
    const std::string where =
        par_.world_size() > 1 ? " on rank " + std::to_string(stopped_by_rank_) : std::string();
    if (par_.is_logging_rank())
      std::fprintf(stderr, "ringtape train: interrupted by %s%s after step %ld: checkpoint saved to %s; continue with "
                   "--resume %s\n", signal_name(sig), where.c_str(), p_.step, ckpt_.c_str(), ckpt_.c_str());
    else
      std::fprintf(stderr, "ringtape train: rank %d stopped by %s%s after step %ld, with every rank; rank 0 saved "
                   "the checkpoint %s\n", par_.rank(), signal_name(sig), where.c_str(), p_.step, ckpt_.c_str());
    return 128 + sig;
  }
  profile_.stop();  // --steps ended inside the profiled steps
  checkpoint();
  if (par_.is_logging_rank()) {
    SaveInProgress saving(weights_.string());
    save_weights(weights_.string(), model_);
    if (ema_.model) {
      SaveInProgress saving_ema(ema_weights_.string());
      save_weights(ema_weights_.string(), *ema_.model);
    }
  }
  log_.done(p_.step, skipped_steps_, weights_.string());
  par_.finish();  // first: on CUDA the last steps' timelines are read there (Note [Two clocks])
  log_.overlap(par_.overlap());
  log_.rank_table();  // Note [Stragglers] in train/straggler.h
  return 0;
}

// The epoch's steps from batch p_.batch on, until the epoch or --steps ends. False when a
// signal stopped them.
bool Trainer::train_epoch() {
  data_.feed->start_epoch(p_.epoch, p_.batch);
  log_.begin_epoch(p_);
  while (p_.step < max_steps_) {
    if (stop_signal()) return false;
    opt_->set_lr(schedule_.lr_at(p_.step));
    profile_.begin_step(p_.step);
    StepOutcome o;
    {
      const prof::RangeScope step(prof::EventKind::step, "step " + std::to_string(p_.step + 1));
      prof::set_step(p_.step);
      dist::flight::set_step(p_.step);
      o = step_.run(*data_.feed, p_);
    }
    profile_.end_step(p_.step);
    p_.samples_seen += o.samples;
    window_.samples += o.samples;
    if (!o.complete) return true;  // the epoch has no batches left
    if (ema_.average && ema_.average->after_optimizer_step(p_.epoch, p_.batch / cfg_.loop.accum_steps))
      ema_.mp->weights_changed();
    p_.batch += cfg_.loop.accum_steps;
    ++p_.step;
    ++window_.steps;
    window_.skipped += o.skipped;
    skipped_steps_ += o.skipped;
    if (p_.step % cfg_.output.print_freq == 0 || p_.step >= max_steps_) log_window();
    log_.step(p_, p_.batch / cfg_.loop.accum_steps, opt_->lr());  // after log_window: its loss is the newest
    if (cfg_.output.checkpoint_every > 0 && p_.step % cfg_.output.checkpoint_every == 0) checkpoint();
  }
  return true;
}

// The evaluation that ends an epoch; the next epoch begins. False when a signal stopped the
// evaluation: the checkpoint then keeps p_.batch at the epoch's end, and a resumed run evaluates.
bool Trainer::end_epoch() {
  const int64_t skipped_train = data_.loader->skipped_in_epoch();
  // Data parallel: the evaluation's all-reduces need every rank, so a signal waits for its
  // end (Note [Stopping together]).
  const EvalResult e = evaluate(s_, mp_, cfg_, par_, par_.world_size() > 1 ? nullptr : &interrupt_);
  if (e.interrupted) return false;
  std::optional<EvalResult> ema;  // the EMA's weights on the same images (torchvision reports both)
  if (ema_.mp) ema = evaluate(s_, *ema_.mp, cfg_, par_, nullptr);
  log_.eval(p_, e, skipped_train, ema ? &*ema : nullptr);
  Allocator& mem = allocator_for(s_.device);
  log_.memory(p_, s_.device, mem.stats(), par_.rank());
  mem.reset_peak();  // the next epoch's peaks are its own
  ++p_.epoch;
  p_.batch = 0;
  return true;
}

// Note [Logged loss]
// A data-parallel run logs the mean over every rank's shard (one all-reduce of a scalar per
// log line), the loss of the global batch a single process would log; rank 0's own shard
// alone would be a sample of it.
void Trainer::log_window() {
  window_.loss_sum = step_.window_loss(window_.first_step, p_);
  if (par_.world_size() > 1) {
    // The loss, then one slot per rank for its signal (Note [Stopping together]), then each
    // rank's phase times (Note [Stragglers] in train/straggler.h): an all-gather in the sum.
    const size_t world = size_t(par_.world_size()), rank = size_t(par_.rank()), P = PhaseTimes::kPacked;
    std::vector<double> sum(1 + world + world * P, 0.0);
    sum[0] = window_.loss_sum;
    sum[1 + rank] = interrupt_.signal();
    with_device_clock(step_.window_phases(), par_.take_device_phases()).pack(&sum[1 + world + rank * P]);
    par_.sum_over_ranks(sum);
    window_.loss_sum = sum[0] / double(par_.world_size());
    note_signals(std::vector<double>(sum.begin() + 1, sum.begin() + 1 + std::ptrdiff_t(world)));
    std::vector<PhaseTimes> by_rank;
    for (size_t r = 0; r < world; ++r) by_rank.push_back(PhaseTimes::unpack(&sum[1 + world + r * P]));
    log_.phases(p_, by_rank, cfg_.parallel.straggler_threshold);
  }
  if (mp_.loss_scaling()) {  // counted on the device (a replayed step decides there)
    const int64_t skips = mp_.overflow_skips();
    window_.overflow_skips = skips - overflow_skips_logged_;
    overflow_skips_logged_ = skips;
  }
  log_.train(p_, opt_->lr(), window_, mp_);
  window_ = LogWindow(p_.step + 1);
  step_.reset_window();
}

// Note [Stopping together]
// A signal reaches the ranks at different steps, or only some of them (the launcher of one
// node of several is stopped; a scheduler signals one task). A rank that stopped at its own
// step boundary left its peers in a collective it never joined: they failed on the broken
// connection, and rank 0, the one that saves, died without a checkpoint. So in a
// data-parallel run a rank does not stop alone: each says which signal it received, if any,
// in the all-reduce that already happens at every log line (the loss's, Note [Logged loss];
// --print-freq steps apart) and at every epoch's end; where any rank got one, every rank
// stops at that step, rank 0 saves the checkpoint, and the ranks leave together
// (ParallelContext::finish). The evaluation, whose all-reduces need every rank, runs to its
// end first. One process stops at the next step boundary, as before.
int Trainer::stop_signal() const { return par_.world_size() > 1 ? agreed_signal_ : interrupt_.signal(); }

void Trainer::note_signals(const std::vector<double>& by_rank) {
  for (size_t r = 0; r < by_rank.size() && !agreed_signal_; ++r)
    if (by_rank[r] != 0) {
      agreed_signal_ = int(by_rank[r]);
      stopped_by_rank_ = int(r);
    }
}

// Every rank checks the loss first: no checkpoint after a NaN/Inf loss kept on the device.
//
// Note [No checkpoint after a failure]
// On GPUs the optimizer step is queued after the gradient all-reduce without the host
// waiting for it; when a rank dies, the communicator aborts the call in flight, the queued
// step then runs on partly averaged gradients, and the launcher stops the survivors with
// SIGTERM, which makes rank 0 save. So before any save the communicator must be whole
// (ParallelContext::check_healthy: queued calls waited for, none failed); if it is not,
// nothing is written and the last checkpoint stays.
void Trainer::checkpoint() {
  step_.window_loss(window_.first_step, p_);
  try {
    par_.check_healthy();
  } catch (const Error& e) {
    RT_FAIL("no checkpoint saved after step ", p_.step, ": the communication between the ranks failed, so this ",
            "step may have used partly averaged gradients (", e.what(), "); the checkpoint saved last stays: ",
            ckpt_.string());
  }
  if (!par_.is_logging_rank()) return;
  SaveInProgress saving(ckpt_.string());
  save_checkpoint(ckpt_.string(), model_, *opt_, p_, flags_, mp_.state(),
                  ema_.average ? ema_.average->state() : std::map<std::string, Tensor>{});
}

}  // namespace

// --test-only: torchvision evaluates the model (and with --model-ema the EMA's weights) and
// returns; nothing is written.
int test_only(const TrainConfig& cfg, ParallelContext& par) {
  Setup s = set_up(cfg, /*training=*/false);
  if (!cfg.output.resume.empty()) {
    check_checkpoint_fits(cfg.output.resume, cfg, s);
    load_checkpoint_model(cfg.output.resume, *s.model);
  } else {
    load_init_weights(cfg, *s.model);
  }
  s.model->to(s.device, s.format);
  MixedPrecision mp(*s.model, mixed_precision_options(s.precision));
  const auto t0 = std::chrono::steady_clock::now();
  const EvalResult e = evaluate(s, mp, cfg, par);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (par.is_logging_rank()) print_eval(cfg.model.name, cfg.data.dataset, e, dt);
  if (cfg.ema.enabled && !cfg.output.resume.empty()) {
    const std::shared_ptr<nn::Module> ema = make_model_like(cfg, s);
    load_checkpoint_model(cfg.output.resume, *ema, /*ema=*/true);
    MixedPrecision ema_mp(*ema, mixed_precision_options(s.precision));
    const EvalResult ee = evaluate(s, ema_mp, cfg, par);
    if (par.is_logging_rank()) print_eval(cfg.model.name + " (EMA)", cfg.data.dataset, ee, dt);
  }
  return 0;
}

int train(const TrainConfig& cfg, ParallelContext& par, RankLog* log) {
  if (cfg.loop.test_only) return test_only(cfg, par);
  return Trainer(cfg, par, log).run();
}

int eval(const EvalConfig& cfg) {
  Setup s = set_up(cfg, /*training=*/false);
  if (!cfg.checkpoint.empty()) {
    check_checkpoint_fits(cfg.checkpoint, cfg, s);
    load_checkpoint_model(cfg.checkpoint, *s.model);
  } else {
    load_init_weights(cfg, *s.model);
  }
  s.model->to(s.device, s.format);
  MixedPrecision mp(*s.model, mixed_precision_options(s.precision));
  SingleProcess one;
  nn::name_modules_for_profiling(*s.model);
  prof::ProfileSession profile(cfg.profile, s.device, s.precision == Precision::tf32,
                               cfg.profile_dir.empty() ? "." : cfg.profile_dir);
  const auto t0 = std::chrono::steady_clock::now();
  const EvalResult e = evaluate(s, mp, cfg, one, nullptr, &profile);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_eval(cfg.model.name, cfg.data.dataset, e, dt);
  return 0;
}

}  // namespace rt::train
