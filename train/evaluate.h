// Evaluation of the model on the test set: loss, top-1 and top-5, after each training
// epoch and in `ringtape eval`.
#pragma once

#include <cstdint>

#include "train/interrupt.h"
#include "train/parallel_context.h"
#include "train/precision.h"
#include "train/setup.h"
#include "train/train_config.h"

namespace rt::train {

// What one process counts over its examples; ParallelContext::sum_eval_counts adds up those
// of every process before the result is computed from them.
struct EvalCounts {
  double loss_sum = 0;    // per-example loss, summed
  int64_t n = 0;          // examples
  int64_t top1 = 0, top5 = 0;
  int64_t nonfinite = 0;  // examples with a NaN/Inf logit (counted as wrong)
  int64_t skipped = 0;    // unreadable images replaced
};

struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;  // mean loss; accuracies in percent
  int64_t n = 0;
  int64_t skipped = 0;
  int64_t nonfinite = 0;
  bool interrupted = false;
};

// Evaluates mp.model() (s.model, or the EMA's) on `s.test_set` in batches of cfg.loader.batch_size, the loss with
// cfg.label_smoothing, in eval mode (left in train mode after). `interrupt` (training only):
// a signal ends the evaluation between batches, unfinished.
// `profile` (may be null): a profile session over the batches (`ringtape eval --profile-steps`).
EvalResult evaluate(const Setup& s, MixedPrecision& mp, const CommonConfig& cfg, ParallelContext& par,
                    const InterruptHandler* interrupt = nullptr, prof::ProfileSession* profile = nullptr);

}  // namespace rt::train
