// The trainer's places where processes that train one model together meet. The trainer
// calls them; SingleProcess, the one implementation today, has nothing to do at them.
//
// Note [Data-parallel attach points]: data parallelism plugs in by implementing
// ParallelContext in its own files, not by growing the loop:
//   - rank(), world_size(): the training sampler shards each epoch by them (train/setup.cc).
//   - is_logging_rank(): console lines, metrics.jsonl and checkpoint files come from this
//     process only (train/logging.cc, Trainer::save_checkpoint); every rank still checks
//     the window's loss before a checkpoint.
//   - before_backward / after_backward / before_optimizer_step: the phases of one optimizer
//     step (TrainStep::run, train/step.cc), in that order. A gradient reducer arms its
//     buckets before the backward of the last micro-batch (`last_micro_step`: with
//     --accum-steps K only that one communicates), its hooks launch all-reduces during
//     backward, and before_optimizer_step waits for them; the optimizer, fp16's unscaling
//     and --skip-nonfinite's gradient check then see the reduced gradients.
//     before_optimizer_step is called exactly when before_backward(true) was: a step
//     skipped on a NaN/Inf loss runs no further backward (a data-parallel run must agree
//     on such a skip across ranks first).
//   - sum_eval_counts: evaluation's counts become the sum over every rank (train/evaluate.cc);
//     a sharded test set must leave out the padding the sampler adds.
#pragma once

namespace rt::train {

struct EvalCounts;  // train/evaluate.h

class ParallelContext {
 public:
  virtual ~ParallelContext() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  bool is_logging_rank() const { return rank() == 0; }

  virtual void before_backward(bool last_micro_step) = 0;
  virtual void after_backward(bool last_micro_step) = 0;
  virtual void before_optimizer_step() = 0;

  virtual void sum_eval_counts(EvalCounts& counts) = 0;
};

// One process: its gradients and counts are already the whole run's.
class SingleProcess final : public ParallelContext {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void before_backward(bool) override {}
  void after_backward(bool) override {}
  void before_optimizer_step() override {}
  void sum_eval_counts(EvalCounts&) override {}
};

}  // namespace rt::train
