#include "train/resume.h"

#include <cstdio>

#include "cli/flags.h"

namespace rt::train {

const std::set<std::string>& trajectory_flags() {
  static const std::set<std::string> names = {
      "model", "width", "small-stem", "num-classes", "dataset", "batch-size", "epochs", "optimizer", "lr",
      "momentum", "nesterov", "weight-decay", "no-bn-bias-decay", "label-smoothing", "lr-scheduler",
      "lr-warmup-epochs", "lr-warmup-decay", "lr-step-size", "lr-milestones", "lr-gamma", "lr-min", "lr-power",
      "accum-steps", "seed", "no-shuffle", "augment", "zero-init-residual", "threads", "synthetic-size",
      "stem-stride", "memory-format", "train-crop-size", "precision"};
  return names;
}

Progress resume(const std::string& path, nn::Module& model, optim::Optimizer& opt, MixedPrecision& mp,
                const std::map<std::string, std::string>& flags) {
  std::map<std::string, std::string> saved;
  std::map<std::string, Tensor> scaler_state;
  const Progress p = load_checkpoint(path, model, opt, &saved, &scaler_state);
  for (const auto& k : trajectory_flags())
    if (saved.count(k) && saved.at(k) != flags.at(k))
      throw cli::UsageError("--resume: the checkpoint was trained with --" + k + " " + saved.at(k) +
                            " but this run has --" + k + " " + flags.at(k) +
                            "; resume with the same value (or start a new run)");
  mp.load_state(scaler_state);
  std::printf("resumed %s at epoch %ld, batch %ld, step %ld\n", path.c_str(), p.epoch, p.batch, p.step);
  return p;
}

}  // namespace rt::train
