// Data-parallel training: the ParallelContext of a process that trains one model with
// others (Note [Data-parallel attach points] in train/parallel_context.h). Every rank runs
// the same trainer on its shard of each epoch; this class is what makes them one run:
//   - the process group: ranks meet through the store rank 0 hosts at MASTER_ADDR:MASTER_PORT
//     (distributed/rendezvous.h), then a communicator: Gloo for CPU tensors, NCCL for CUDA ones
//     (this rank's GPU is cuda:LOCAL_RANK);
//   - attach(): rank 0's parameters and buffers are broadcast (ranks started from different
//     seeds train identically) and the gradient reducer is built
//     (distributed/reducer.h, Note [Gradient buckets]);
//   - the step's phases arm the reducer before the last micro-batch's backward, launch the
//     rest after it, and wait for the averaged gradients before the optimizer step;
//   - evaluation: each rank evaluates its shard of the test set without the sampler's
//     padding, with rank 0's batch-norm running statistics, and the counts are summed;
//   - the overlap of communication with backward, per step, for the log and metrics.jsonl;
//     with --comm-timeline, rank 0 also writes each step's timeline to
//     <output-dir>/timeline.jsonl (Note [Timeline file]).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/communicator.h"
#include "distributed/launch_env.h"
#include "distributed/reducer.h"
#include "distributed/rendezvous.h"
#include "engine/nn/module.h"
#include "train/metrics.h"
#include "train/parallel_context.h"
#include "train/train_config.h"

namespace rt::train {

class DataParallel final : public ParallelContext {
 public:
  // Joins the process group described by `env` (all ranks, within cfg.timeout). `device`:
  // the run's device; CUDA runs use cuda:LOCAL_RANK.
  DataParallel(const dist::LaunchEnv& env, Device device, const ParallelConfig& cfg);
  ~DataParallel() override;

  int rank() const override { return env_.rank; }
  int world_size() const override { return env_.world_size; }
  bool is_data_parallel() const override { return true; }
  std::string describe() const override;
  std::string agree(const std::string& key, const std::string& rank0_value) override;

  void attach(nn::Module& model, nn::ComputeCopies* copies, const std::string& run_dir) override;
  void before_backward(bool last_micro_step) override;
  void after_backward(bool last_micro_step) override;
  void before_optimizer_step() override;

  void before_evaluation(nn::Module& model) override;
  EvalShard eval_shard(int64_t test_size) const override;
  void sum_eval_counts(EvalCounts& counts) override;
  void sum_over_ranks(std::vector<double>& values) override;

  std::string capture_blocker() const override;
  bool on_every_rank(bool mine) override;
  void after_replay(const Stream& stream) override;

  void check_healthy() override {
    comm_->check_healthy();
    if (sync_comm_) sync_comm_->check_healthy();
  }
  int restart_round() const override { return env_.restart_round; }
  std::string restart_cause() const override { return env_.restart_cause; }
  OverlapStats overlap() const override { return overlap_; }
  PhaseTimes take_device_phases() override { return std::exchange(device_phases_, PhaseTimes{}); }
  void finish() override;

 private:
  dist::LaunchEnv env_;
  ParallelConfig cfg_;
  Device device_;
  dist::RendezvousStore store_;
  std::unique_ptr<dist::Communicator> comm_;       // the gradients', evaluation's, agreements'
  std::unique_ptr<dist::Communicator> sync_comm_;  // --sync-bn's (Note [Sync batch norm on its own communicator])
  std::unique_ptr<dist::Reducer> reducer_;
  nn::NamedTensors params_;       // the model's parameters (Note [Same weights at the end])
  std::vector<Tensor> buffers_;  // the model's buffers (batch-norm running statistics)
  OverlapStats overlap_;
  PhaseTimes device_phases_;  // from the device's timelines since take_device_phases() (Note [Stragglers])

  void account(const dist::StepTimeline& t);
  void write_timeline(const dist::StepTimeline& t);
  std::optional<MetricsLog> timeline_;   // --comm-timeline on rank 0
  int64_t timeline_steps_ = 0;
};

}  // namespace rt::train
