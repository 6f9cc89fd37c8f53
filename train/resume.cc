#include "train/resume.h"

#include <cstdio>

#include "base/usage_error.h"

namespace rt::train {

Progress resume(const std::string& path, nn::Module& model, optim::Optimizer& opt, MixedPrecision& mp,
                const std::map<std::string, std::string>& flags, const std::set<std::string>& trajectory,
                int64_t steps_per_epoch, optim::ModelEma* ema) {
  std::map<std::string, std::string> saved;
  std::map<std::string, Tensor> scaler_state, ema_state;
  Progress p = load_checkpoint(path, model, opt, &saved, &scaler_state, &ema_state);
  const auto ws = flags.find("world-size");
  const int64_t now_world = ws == flags.end() ? 1 : std::stoll(ws->second);
  const int64_t then_world = saved.count("world-size") ? std::stoll(saved.at("world-size")) : 1;
  // The threads matter for a bit-exact continuation only, which another number of ranks
  // does not give anyway (said below); an older checkpoint recorded --threads as typed.
  const auto threads_differ_ok = [&] { return then_world != now_world || saved.at("threads") == "0"; };
  for (const auto& k : trajectory)
    if (saved.count(k) && saved.at(k) != flags.at(k) && !(k == "threads" && threads_differ_ok()))
      throw UsageError("--resume: the checkpoint was trained with --" + k + " " + saved.at(k) +
                       " but this run has --" + k + " " + flags.at(k) +
                       "; resume with the same value (or start a new run)");
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
  std::printf("resumed %s at epoch %ld, batch %ld, step %ld\n", path.c_str(), p.epoch, p.batch, p.step);
  return p;
}

}  // namespace rt::train
