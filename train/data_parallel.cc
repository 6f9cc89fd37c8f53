#include "train/data_parallel.h"

#include <chrono>
#include <cstdio>

#include "dist/gloo_communicator.h"
#include "dist/nccl_communicator.h"
#include "engine/error.h"
#include "train/evaluate.h"

namespace rt::train {
namespace {

dist::Millis timeout_of(const ParallelConfig& cfg) { return dist::Millis(int64_t(cfg.timeout_s * 1000.0)); }

}  // namespace

DataParallel::DataParallel(const dist::LaunchEnv& env, Device device, const ParallelConfig& cfg)
    : env_(env), cfg_(cfg), device_(device) {
  store_ = dist::connect_store(env_, timeout_of(cfg_));
  dist::CommOptions o;
  o.timeout = timeout_of(cfg_);
  if (device_.is_cuda()) {
    comm_ = std::make_unique<dist::NcclCommunicator>(*store_.store, env_.rank, env_.world_size, device_.index, o);
  } else {
    comm_ = std::make_unique<dist::GlooCommunicator>(*store_.store, env_.rank, env_.world_size, o);
  }
}

DataParallel::~DataParallel() = default;

std::string DataParallel::describe() const {
  return "data parallel: rank " + std::to_string(env_.rank) + " of " + std::to_string(env_.world_size) + " (" +
         comm_->backend() + ", --allreduce " + dist::algo_name(cfg_.allreduce) + ", buckets of " +
         std::to_string(int64_t(cfg_.bucket_cap_mb)) + " MiB)";
}

// Rank 0's value, through the store: what must be the same on every rank but is decided in
// one place (the run's directory name, made from rank 0's clock).
std::string DataParallel::agree(const std::string& key, const std::string& rank0_value) {
  const std::string k = "rt/agree/" + key;
  if (env_.rank == 0) {
    store_.store->set(k, dist::Bytes(rank0_value.begin(), rank0_value.end()));
    return rank0_value;
  }
  const dist::Bytes v = store_.store->get(k, timeout_of(cfg_));
  return std::string(v.begin(), v.end());
}

void DataParallel::attach(nn::Module& model, bool compute_copies) {
  // Note [Data parallel with compute copies]: under bf16/fp16 the gradients are produced on
  // the 16-bit compute copies and summed into the masters after every micro-batch; reducing
  // them in the copies' dtype would reduce only the last micro-batch of an accumulation.
  // Until the reducer handles the masters' gradients, a data-parallel run computes in fp32.
  RT_CHECK(!compute_copies, "data parallel training with 16-bit compute copies (--precision bf16/fp16) is not "
           "supported yet: pass --precision fp32 (or tf32 on a GPU)");
  std::vector<Tensor> state;
  std::vector<dist::Reducer::Param> params;
  for (const auto& [name, t] : model.named_parameters()) {
    state.push_back(t);
    if (t.requires_grad()) params.emplace_back(name, t);
  }
  for (const auto& [name, t] : model.named_buffers()) {
    state.push_back(t);
    buffers_.push_back(t);
  }
  dist::broadcast_from_rank0(*comm_, state, timeout_of(cfg_));
  dist::ReducerOptions ro;
  ro.bucket_bytes = size_t(cfg_.bucket_cap_mb * double(1 << 20));
  ro.first_bucket_bytes = std::min(ro.bucket_bytes, size_t(1) << 20);
  ro.algo = cfg_.allreduce;
  ro.find_unused = cfg_.find_unused_parameters;
  ro.timeout = timeout_of(cfg_);
  reducer_ = std::make_unique<dist::Reducer>(*comm_, std::move(params), ro);
}

void DataParallel::before_backward(bool last) { reducer_->prepare(last); }

void DataParallel::after_backward(bool last) {
  if (last) reducer_->end_backward();
}

void DataParallel::before_optimizer_step() {
  reducer_->wait_for_gradients();
  const dist::StepTimeline& t = reducer_->last_timeline();
  const double total = t.comm_seconds();
  if (total > 0) {
    ++overlap_.steps;
    overlap_.comm_seconds += total;
    overlap_.hidden_seconds += total * t.overlap();
    overlap_.last = t.overlap();
  }
}

// Rank 0's running statistics for every rank's evaluation: each rank's were updated from its
// own shards, and the single-process evaluation this must equal has one set.
void DataParallel::before_evaluation(nn::Module&) { dist::broadcast_from_rank0(*comm_, buffers_, timeout_of(cfg_)); }

// The sampler (data/sampler.h) gives rank r positions r, r + W, ... of the padded order;
// positions at or past test_size are the padding, the last of each rank's list.
EvalShard DataParallel::eval_shard(int64_t test_size) const {
  const int64_t W = env_.world_size, r = env_.rank;
  return EvalShard{int(r), int(W), r < test_size ? (test_size - r + W - 1) / W : 0};
}

void DataParallel::sum_eval_counts(EvalCounts& c) {
  // f64 holds every count exactly (< 2^53).
  Tensor t = Tensor::from_vector(std::vector<double>{c.loss_sum, double(c.n), double(c.top1), double(c.top5),
                                                     double(c.nonfinite), double(c.skipped)},
                                 {6})
                 .to(comm_->device());
  comm_->all_reduce(t, dist::ReduceOp::sum, dist::AllReduceAlgo::library, timeout_of(cfg_)).wait();
  const std::vector<double> v = t.to_vector<double>();
  c.loss_sum = v[0];
  c.n = int64_t(v[1]);
  c.top1 = int64_t(v[2]);
  c.top5 = int64_t(v[3]);
  c.nonfinite = int64_t(v[4]);
  c.skipped = int64_t(v[5]);
}

// The last barrier before rank 0's store goes away (dist/rendezvous.h: join is safe as the
// last one).
void DataParallel::finish() { dist::join(*store_.store, env_.rank, env_.world_size, timeout_of(cfg_)); }

}  // namespace rt::train
