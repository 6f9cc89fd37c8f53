#include "train/resume.h"

#include <cstdio>

#include "base/usage_error.h"
#include "train/setup.h"

namespace rt::train {

namespace {

// The recorded settings against this run's, before the tensors (Note [Settings before tensors]).
void check_settings(const std::string& path, const std::map<std::string, std::string>& saved,
                    const std::map<std::string, std::string>& flags, const std::set<std::string>& trajectory,
                    bool threads_may_differ) {
  std::string differ;
  for (const auto& k : trajectory)
    if (saved.count(k) && flags.count(k) && saved.at(k) != flags.at(k) && !(k == "threads" && threads_may_differ))
      differ += std::string(differ.empty() ? "" : ", ") + "--" + k + " " + saved.at(k) + " but this run has --" + k +
                " " + flags.at(k);
  if (!differ.empty())
    throw UsageError("--resume: the checkpoint " + path + " was trained with " + differ +
                     "; resume with the checkpoint's values (or start a new run in another --output-dir)");
  std::map<std::string, std::string> now;
  for (const auto& [k, v] : flags)
    if (k.rfind("arch.", 0) == 0) now[k] = v;
  const std::string arch = architecture_difference(saved, now);
  if (!arch.empty())
    throw UsageError("--resume: the checkpoint " + path + " holds another model than this run builds with the same "
                     "flags (" + arch + "): the data decided it (another --data-path with other classes or "
                     "channels?); resume on the checkpoint's data, or start a new run from its weights with "
                     "--init-weights " + path + " --init-weights-non-strict");
}

}  // namespace

Progress resume(const std::string& path, nn::Module& model, optim::Optimizer& opt, MixedPrecision& mp,
                const std::map<std::string, std::string>& flags, const std::set<std::string>& trajectory,
                int64_t steps_per_epoch, optim::ModelEma* ema) {
  const std::map<std::string, std::string> recorded = read_checkpoint_flags(path);
  const auto ws = flags.find("world-size");
  const int64_t now_world = ws == flags.end() ? 1 : std::stoll(ws->second);
  const int64_t then_world = recorded.count("world-size") ? std::stoll(recorded.at("world-size")) : 1;
  // The threads matter for a bit-exact continuation only, which another number of ranks
  // does not give anyway (said below); an older checkpoint recorded --threads as typed.
  const bool threads_may_differ =
      then_world != now_world || (recorded.count("threads") && recorded.at("threads") == "0");
  check_settings(path, recorded, flags, trajectory, threads_may_differ);
  std::map<std::string, std::string> saved;
  std::map<std::string, Tensor> scaler_state, ema_state;
  Progress p = load_checkpoint(path, model, opt, &saved, &scaler_state, &ema_state);
  mp.load_state(scaler_state);
  if (ema) {
    if (ema_state.empty())
      throw UsageError("--resume: the checkpoint " + path + " holds no EMA weights (it was trained without "
                       "--model-ema); resume without --model-ema, or start a new run");
    ema->load_state(ema_state);
  }
  // Note [Resume with another world size]
  // p.batch counts this epoch's batches per rank. With another number of ranks the epoch is
  // sharded anew; the run continues after the same number of the epoch's examples (rounded
  // down to whole optimizer steps), so no example of the epoch is trained on twice and at
  // most one step's worth is left out. The step counter is recounted in the new run's steps
  // (epochs before this one, then this epoch's steps done): the schedule, a function of the
  // step and the steps per epoch, stays at the same point of its epochs, and the run ends
  // after its last epoch, as it would have.
  if (then_world != now_world) {
    const int64_t accum = flags.count("accum-steps") ? std::stoll(flags.at("accum-steps")) : 1;
    const int64_t batch = p.batch * then_world / now_world / accum * accum;
    const int64_t step = p.epoch * steps_per_epoch + batch / accum;
    std::printf("resuming a run of %ld process(es) with %ld: the global batch changes by %ld/%ld (the learning rate "
                "does not); epoch %ld continues at this rank's batch %ld instead of %ld, and step %ld counts as "
                "step %ld of %ld steps per epoch\n",
                then_world, now_world, now_world, then_world, p.epoch, batch, p.batch, p.step, step,
                steps_per_epoch);
    p.batch = batch;
    p.step = step;
  }
  // The schedule is a function of the step and this run's steps per epoch: a training set that
  // gives fewer (or more) steps per epoch than the checkpoint's moves the checkpoint's step to
  // another point of it and shortens (or lengthens) the run.
  const int64_t then_steps = saved.count("steps-per-epoch") ? std::stoll(saved.at("steps-per-epoch")) : 0;
  if (then_world == now_world && then_steps > 0 && then_steps != steps_per_epoch) {
    const int64_t epochs = flags.count("epochs") ? std::stoll(flags.at("epochs")) : 0;
    std::printf("resume: this run has %ld steps per epoch, the checkpoint's run had %ld (another training set): "
                "the learning-rate schedule and the run now span %ld epochs x %ld = %ld steps instead of %ld, and "
                "the checkpoint's step %ld lies at epoch %.2f of that schedule (it was saved in epoch %ld)\n",
                steps_per_epoch, then_steps, epochs, steps_per_epoch, epochs * steps_per_epoch, epochs * then_steps,
                p.step, double(p.step) / double(steps_per_epoch), p.epoch);
  }
  std::printf("resumed %s at epoch %ld, batch %ld, step %ld\n", path.c_str(), p.epoch, p.batch, p.step);
  return p;
}

}  // namespace rt::train
