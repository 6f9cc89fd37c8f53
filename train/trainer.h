// `ringtape train` and `ringtape eval`: everything between parsed flags and a trained,
// saved model.
//
// The flags become a typed configuration once (train/train_config.h); then
//   set-up         train/setup.h, train/resume.h, train/output_dir.h
//   the step       train/step.h: batch -> forward -> loss -> backward -> update
//   evaluation     train/evaluate.h
//   logging        train/logging.h, train/metrics.h
//   checkpoints    train/checkpoint.h, train/interrupt.h (signals), train/nonfinite.h
// and the loop below (train/trainer.cc) ties them together: epochs of steps, a log line
// every --print-freq steps, an evaluation and a checkpoint after each epoch. Data
// parallelism attaches through ParallelContext (Note [Data-parallel attach points]).
#pragma once

#include <string>
#include <vector>

#include "train/parallel_context.h"
#include "train/train_config.h"

namespace rt::train {

class RankLog;  // train/rank_log.h

// Trains as `par` says. Returns the exit status: 0 when training finished (the checkpoint
// and model.safetensors written), 128 + N when signal N stopped it (a checkpoint written).
// `log`: a data-parallel rank's log (train/rank_log.h), opened in the run's directory.
int train(const TrainConfig& cfg, ParallelContext& par, RankLog* log = nullptr);
// Evaluates the weights `cfg` names on the test set and prints the result; returns 0.
int eval(const EvalConfig& cfg);

}  // namespace rt::train
