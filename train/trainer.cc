// The training loop: epochs of optimizer steps from where the run stands (Note [Exact
// resume], train/resume.h), a log line every --print-freq steps, an evaluation at the end of
// each epoch, a checkpoint after it (and every --checkpoint-every steps), and on a signal a
// last checkpoint (Note [Interrupts], train/interrupt.h).
#include "train/trainer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "train/evaluate.h"
#include "train/interrupt.h"
#include "train/logging.h"
#include "train/output_dir.h"
#include "train/resume.h"
#include "train/setup.h"
#include "train/step.h"

namespace rt::train {
namespace {

namespace fs = std::filesystem;

// The model with --init-weights loaded, on the device, in training mode.
nn::Module& ready_to_train(const TrainConfig& cfg, const Setup& s) {
  load_init_weights(cfg, *s.model);
  s.model->to(s.device, s.format);
  s.model->train();
  return *s.model;
}

// The flags the checkpoint records, with the precision auto chose: resuming must choose the same.
std::map<std::string, std::string> flags_to_record(const TrainConfig& cfg, Precision precision) {
  std::map<std::string, std::string> flags = cfg.recorded_flags;
  flags["precision"] = precision_name(precision);
  return flags;
}

// The members are declared in the order they are set up.
class Trainer {
 public:
  Trainer(const TrainConfig& cfg, ParallelContext& par);
  int run();

 private:
  bool train_epoch();
  bool end_epoch();
  void log_window();
  void checkpoint();

  const TrainConfig& cfg_;
  ParallelContext& par_;
  Setup s_;
  fs::path dir_, ckpt_, weights_;
  nn::Module& model_;
  std::unique_ptr<optim::Optimizer> opt_;
  MixedPrecision mp_;
  TrainData data_;
  optim::LrSchedule schedule_;
  std::map<std::string, std::string> flags_;
  Progress p_;
  int64_t max_steps_;
  TrainLog log_;
  InterruptHandler interrupt_;
  TrainStep step_;
  LogWindow window_;
  int64_t skipped_steps_ = 0;  // by --skip-nonfinite, in this process
};

Trainer::Trainer(const TrainConfig& cfg, ParallelContext& par)
    : cfg_(cfg),
      par_(par),
      s_(set_up(cfg, /*training=*/true)),
      dir_(open_output_dir(cfg.output, std::string(dataset_name(cfg.data.dataset)) + "-" + cfg.model.name)),
      ckpt_(dir_ / "checkpoint.safetensors"),
      weights_(dir_ / "model.safetensors"),
      model_(ready_to_train(cfg, s_)),
      opt_(make_optimizer(cfg.optimizer, model_)),
      mp_(model_, mixed_precision_options(s_.precision)),
      data_(open_train_data(cfg, s_, mp_.input_dtype(), par)),
      schedule_(cfg.optimizer.lr, data_.steps_per_epoch, cfg.loop.epochs, cfg.lr_schedule),
      flags_(flags_to_record(cfg, s_.precision)),
      p_(cfg.output.resume.empty() ? Progress{} : resume(cfg.output.resume, model_, *opt_, mp_, flags_)),
      max_steps_(cfg.loop.max_steps > 0 ? cfg.loop.max_steps : cfg.loop.epochs * data_.steps_per_epoch),
      log_((dir_ / "metrics.jsonl").string(), par.is_logging_rank(), p_.step, max_steps_, cfg.loop.skip_nonfinite),
      step_(model_, *opt_, mp_, par, cfg.loop, cfg.label_smoothing, s_.device),
      window_(p_.step + 1) {}

int Trainer::run() {
  log_.start(s_.device, s_.train_set->size(), data_.steps_per_epoch, cfg_.loop.epochs, schedule_.describe(),
             dir_.string());
  while (p_.step < max_steps_ && p_.epoch < cfg_.loop.epochs) {
    if (!train_epoch()) break;
    const bool epoch_done = p_.batch + cfg_.loop.accum_steps > data_.batches_per_epoch;
    if (epoch_done && !end_epoch()) break;
    checkpoint();
  }
  if (const int sig = interrupt_.signal()) {  // also one that came after the last step
    checkpoint();
    std::fprintf(stderr, "ringtape train: interrupted by %s after step %ld: checkpoint saved to %s; continue with "
                 "--resume %s\n", signal_name(sig), p_.step, ckpt_.c_str(), ckpt_.c_str());
    return 128 + sig;
  }
  checkpoint();
  if (par_.is_logging_rank()) {
    SaveInProgress saving(weights_.string());
    save_weights(weights_.string(), model_);
  }
  log_.done(p_.step, skipped_steps_, weights_.string());
  return 0;
}

// The epoch's steps from batch p_.batch on, until the epoch or --steps ends. False when a
// signal stopped them.
bool Trainer::train_epoch() {
  data_.feed->start_epoch(p_.epoch, p_.batch);
  while (p_.step < max_steps_) {
    if (interrupt_.signal()) return false;
    opt_->set_lr(schedule_.lr_at(p_.step));
    const StepOutcome o = step_.run(*data_.feed, p_);
    p_.samples_seen += o.samples;
    window_.samples += o.samples;
    if (!o.complete) return true;  // the epoch has no batches left
    p_.batch += cfg_.loop.accum_steps;
    ++p_.step;
    ++window_.steps;
    window_.skipped += o.skipped;
    window_.overflow_skips += o.overflow;
    skipped_steps_ += o.skipped;
    if (p_.step % cfg_.output.print_freq == 0 || p_.step >= max_steps_) log_window();
    if (cfg_.output.checkpoint_every > 0 && p_.step % cfg_.output.checkpoint_every == 0) checkpoint();
  }
  return true;
}

// The evaluation that ends an epoch; the next epoch begins. False when a signal stopped the
// evaluation: the checkpoint then keeps p_.batch at the epoch's end, and a resumed run evaluates.
bool Trainer::end_epoch() {
  const int64_t skipped_train = data_.loader->skipped_in_epoch();
  const EvalResult e = evaluate(s_, mp_, cfg_, par_, &interrupt_);
  if (e.interrupted) return false;
  log_.eval(p_, e, skipped_train);
  ++p_.epoch;
  p_.batch = 0;
  return true;
}

void Trainer::log_window() {
  window_.loss_sum = step_.window_loss(window_.first_step, p_);
  log_.train(p_, opt_->lr(), window_, mp_);
  window_ = LogWindow(p_.step + 1);
  step_.reset_window();
}

// Every rank checks the loss first: no checkpoint after a NaN/Inf loss kept on the device.
void Trainer::checkpoint() {
  step_.window_loss(window_.first_step, p_);
  if (!par_.is_logging_rank()) return;
  SaveInProgress saving(ckpt_.string());
  save_checkpoint(ckpt_.string(), model_, *opt_, p_, flags_, mp_.state());
}

}  // namespace

int train(const TrainConfig& cfg, ParallelContext& par) { return Trainer(cfg, par).run(); }

int eval(const EvalConfig& cfg) {
  Setup s = set_up(cfg, /*training=*/false);
  if (!cfg.checkpoint.empty()) load_checkpoint_model(cfg.checkpoint, *s.model);
  else load_init_weights(cfg, *s.model);
  s.model->to(s.device, s.format);
  MixedPrecision mp(*s.model, mixed_precision_options(s.precision));
  SingleProcess one;
  const auto t0 = std::chrono::steady_clock::now();
  const EvalResult e = evaluate(s, mp, cfg, one);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_eval(cfg.model.name, dataset_name(cfg.data.dataset), e, dt);
  return 0;
}

int run_train(const cli::Flags& flags) {
  SingleProcess one;
  return train(parse_train_config(flags), one);
}

int run_eval(const cli::Flags& flags) { return eval(parse_eval_config(flags)); }

}  // namespace rt::train
