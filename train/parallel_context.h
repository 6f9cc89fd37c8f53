// The trainer's places where processes that train one model together meet. The trainer
// calls them; SingleProcess, the one implementation today, has nothing to do at them.
//
// Note [Data-parallel attach points]
// Data parallelism plugs in by implementing ParallelContext in its own files, not by
// growing the loop:
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
//     skipped on a NaN/Inf loss runs no further backward.
//   - sum_over_ranks: the ranks agree on what each decides alone, with one small all-reduce
//     (Note [Skipping together], train/step.cc): every rank skips a step when any rank
//     must, and the logged loss is every rank's, not rank 0's shard's.
//   - sum_eval_counts: evaluation's counts become the sum over every rank (train/evaluate.cc);
//     a sharded test set must leave out the padding the sampler adds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/straggler.h"

namespace rt {
class Stream;
}
namespace rt::nn {
class Module;
class ComputeCopies;
}

namespace rt::train {

struct EvalCounts;  // train/evaluate.h

// Which examples of the test set this rank evaluates: positions rank, rank + world, ... of
// the unshuffled order (data/loading/sampler.h), of which the first `valid` count (the rest is the
// sampler's padding).
struct EvalShard {
  int rank = 0, world = 1;
  int64_t valid = 0;
};

// Communication hidden behind backward, over the steps that communicated (distributed/reducer.h's
// timeline): hidden_seconds / comm_seconds is the overlap.
struct OverlapStats {
  int64_t steps = 0;
  double comm_seconds = 0, hidden_seconds = 0;
  double last = -1;  // the last step's fraction
  double fraction() const { return comm_seconds > 0 ? hidden_seconds / comm_seconds : -1; }
};

class ParallelContext {
 public:
  virtual ~ParallelContext() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Trains with others through a communicator (also at world size 1 under a launcher:
  // Note [World 1 under a launcher], train/trainer.cc).
  virtual bool is_data_parallel() const { return world_size() > 1; }
  bool is_logging_rank() const { return rank() == 0; }
  virtual std::string describe() const = 0;  // a line for the start of the log
  // Rank 0's `rank0_value` on every rank (what must agree but is decided in one place).
  virtual std::string agree(const std::string& key, const std::string& rank0_value) = 0;

  // The model is built, on its device, resumed: the data-parallel context makes every rank's
  // copy rank 0's and hooks its gradients (`copies`: the 16-bit compute copies that produce
  // them under mixed precision, else null). `run_dir`: the run's directory, the same on every
  // rank (where a data-parallel run's own files go).
  virtual void attach(nn::Module& model, nn::ComputeCopies* copies, const std::string& run_dir) = 0;
  virtual void before_backward(bool last_micro_step) = 0;
  virtual void after_backward(bool last_micro_step) = 0;
  virtual void before_optimizer_step() = 0;

  virtual void before_evaluation(nn::Module& model) = 0;
  virtual EvalShard eval_shard(int64_t test_size) const = 0;
  virtual void sum_eval_counts(EvalCounts& counts) = 0;
  // `values` summed element-wise over every rank, on every rank (each calls it at the same
  // point of the run with as many values; the host waits for the result).
  virtual void sum_over_ranks(std::vector<double>& values) = 0;

  // --cuda-graphs (Note [The training step as a CUDA graph] in train/step.cc): "" when a step
  // with this context's collectives can be captured, else why not (for the log).
  virtual std::string capture_blocker() const { return ""; }
  // Whether `mine` holds on every rank (the host waits for the answer): the ranks decide
  // together to capture, as NCCL needs every rank to capture the same collectives.
  virtual bool on_every_rank(bool mine) { return mine; }
  // After each launch of the captured step on `stream`: its collectives are watched as one
  // call (Note [Collectives in a CUDA graph] in distributed/communicator.h).
  virtual void after_replay(const Stream& /*stream*/) {}

  // Throws when the ranks' communication failed (their state may hold partly averaged
  // gradients); before a checkpoint (Note [No checkpoint after a failure], trainer.cc).
  virtual void check_healthy() = 0;

  // How often ringtape's launcher restarted this job, and why the last time
  // (Note [Elastic restarts] in distributed/local_launcher.cc); 0 and "" for a first start.
  virtual int restart_round() const { return 0; }
  virtual std::string restart_cause() const { return ""; }

  // The device's phase times of the steps whose timelines arrived since the last call (steps 0
  // where there are none: CPU processes, captured steps; Note [Stragglers] in train/straggler.h).
  virtual PhaseTimes take_device_phases() { return {}; }

  virtual OverlapStats overlap() const = 0;
  // The last meeting of the ranks: the run ended, or every rank stopped at the same step for a
  // signal (Note [Stopping together], trainer.cc); also checks they hold the same weights.
  virtual void finish() = 0;
};

// One process: its gradients and counts are already the whole run's.
class SingleProcess final : public ParallelContext {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string describe() const override { return "one process"; }
  std::string agree(const std::string&, const std::string& v) override { return v; }
  void attach(nn::Module&, nn::ComputeCopies*, const std::string&) override {}
  void before_backward(bool) override {}
  void after_backward(bool) override {}
  void before_optimizer_step() override {}
  void before_evaluation(nn::Module&) override {}
  EvalShard eval_shard(int64_t test_size) const override { return EvalShard{0, 1, test_size}; }
  void sum_eval_counts(EvalCounts&) override {}
  void sum_over_ranks(std::vector<double>&) override {}
  void check_healthy() override {}
  OverlapStats overlap() const override { return {}; }
  void finish() override {}
};

}  // namespace rt::train
