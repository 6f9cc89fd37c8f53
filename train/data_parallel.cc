#include "train/data_parallel.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>

#include "distributed/flight_recorder.h"
#include "distributed/gloo_communicator.h"
#include "distributed/nccl_communicator.h"
#include "distributed/sync_batch_norm.h"
#include "base/error.h"
#include "engine/nn/compute_copies.h"
#include "engine/nn/layers.h"
#include "kernels/cuda/runtime.h"
#include "train/evaluate.h"

namespace rt::train {
namespace {

dist::Millis timeout_of(const ParallelConfig& cfg) { return dist::Millis(int64_t(cfg.timeout_s * 1000.0)); }

}  // namespace

DataParallel::DataParallel(const dist::LaunchEnv& env, Device device, const ParallelConfig& cfg)
    : env_(env), cfg_(cfg), device_(device) {
  dist::flight::configure(env_.rank, env_.world_size, cfg_.trace_buffer);  // before any collective
  store_ = dist::connect_store(env_, timeout_of(cfg_));
  dist::CommOptions o;
  o.timeout = timeout_of(cfg_);
  if (device_.is_cuda()) {
    // One GPU model per run: a slower model paces every step, and mixed cards are most often
    // a mistake in CUDA_VISIBLE_DEVICES (ringtape doctor lists them).
    const std::string mine = cuda::device_props(device_.index).name;
    const std::string rank0 = agree("gpu-model", mine);
    RT_CHECK(mine == rank0, "data parallel: rank ", env_.rank, " runs on a ", mine, " (cuda:", device_.index,
             ") but rank 0 on a ", rank0, ": use GPUs of one model (set CUDA_VISIBLE_DEVICES; see ringtape doctor)");
    dist::CommOptions timed = o;
    timed.timed_events = true;  // the overlap figure on the device's clock (Note [Two clocks] in distributed/reducer.h)
    comm_ = std::make_unique<dist::NcclCommunicator>(*store_.store, env_.rank, env_.world_size, device_.index, timed);
  } else {
    comm_ = std::make_unique<dist::GlooCommunicator>(*store_.store, env_.rank, env_.world_size, o);
  }
  if (cfg_.sync_bn) {
    // Note [Sync batch norm on its own communicator]
    // SyncBN's all-gathers run inside forward and backward, and backward waits for them; on
    // the gradients' communicator (one stream on NCCL, one queue on Gloo) each waited behind
    // every bucket all-reduce queued before it, so backward stalled on communication the
    // design means to hide. And with --find-unused-parameters, buckets and all-gathers could
    // be issued in different orders on different ranks (a collective mismatch). Their own
    // communicator (keys under its own prefix: its own NCCL communicator and stream, or Gloo
    // context and queue) orders each kind by itself, the same on every rank.
    o.prefix = "rt-sync-bn";
    o.name = o.purpose = "sync_bn";
    if (device_.is_cuda())
      sync_comm_ = std::make_unique<dist::NcclCommunicator>(*store_.store, env_.rank, env_.world_size, device_.index, o);
    else
      sync_comm_ = std::make_unique<dist::GlooCommunicator>(*store_.store, env_.rank, env_.world_size, o);
  }
}

DataParallel::~DataParallel() = default;

std::string DataParallel::describe() const {
  char cap[32];  // as given: --bucket-cap-mb 0.5 is "0.5 MiB", not "0 MiB"
  std::snprintf(cap, sizeof cap, "%g", cfg_.bucket_cap_mb);
  return "data parallel: rank " + std::to_string(env_.rank) + " of " + std::to_string(env_.world_size) + " (" +
         comm_->backend() + ", --allreduce " + dist::algo_name(cfg_.allreduce) + ", buckets of " + cap + " MiB" +
         (sync_comm_ ? ", --sync-bn on a communicator of its own" : "") + ")";
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

void DataParallel::attach(nn::Module& model, nn::ComputeCopies* copies, const std::string& run_dir) {
  dist::flight::set_run_dir(env_.rank, run_dir);
  std::vector<Tensor> state;
  std::vector<dist::Reducer::Param> params;
  for (const auto& [name, t] : model.named_parameters()) {
    state.push_back(t);
    params_.emplace_back(name, t);
    if (t.requires_grad()) params.emplace_back(name, t);
  }
  for (const auto& [name, t] : model.named_buffers()) {
    state.push_back(t);
    buffers_.push_back(t);
  }
  dist::broadcast_from_rank0(*comm_, state, timeout_of(cfg_));
  dist::ReducerOptions ro;
  ro.bucket_bytes = size_t(cfg_.bucket_cap_mb * double(1 << 20));
  ro.first_bucket_bytes = std::min(ro.bucket_bytes, ro.first_bucket_bytes);  // the reducer's, or less
  ro.algo = cfg_.allreduce;
  ro.find_unused = cfg_.find_unused_parameters;
  ro.timeout = timeout_of(cfg_);
  // Note [Reduce dtype] in distributed/reducer.h. Gloo reduces f32/f64 only: bf16 is NCCL's.
  RT_CHECK(cfg_.grad_reduce_dtype != DType::bf16 || device_.is_cuda(),
           "--grad-reduce-dtype bf16 needs GPUs (NCCL); CPU processes reduce in fp32: drop the flag");
  if (cfg_.grad_reduce_dtype == DType::bf16) ro.reduce_dtype = DType::bf16;
  if (!copies) {
    reducer_ = std::make_unique<dist::Reducer>(*comm_, std::move(params), ro);
  } else {
    // Note [Data parallel with compute copies]
    // Under bf16/fp16 the graph's leaves are the 16-bit copies, the optimizer consumes the
    // masters' gradients (their dtype: f32). The buckets hold the masters' gradients, so what
    // is reduced is what the optimizer consumes, in f32, accumulation micro-steps included;
    // each copy's hook widens its gradient into the master's bucket view
    // (ComputeCopies::accumulate_grad) and marks the master ready, so the buckets still launch
    // during backward (Note [Gradients produced elsewhere]). Parameters without a copy
    // (batch-norm's, kept in f32) produce their own gradients.
    std::map<const TensorImpl*, size_t> copy_of;
    for (size_t i = 0; i < copies->masters().size(); ++i) copy_of[copies->masters()[i].second.impl_ptr().get()] = i;
    std::vector<Tensor> producers;
    std::vector<int64_t> which;  // params[k]'s copy index, or -1
    for (const auto& [name, t] : params) {
      const auto it = copy_of.find(t.impl_ptr().get());
      which.push_back(it == copy_of.end() ? -1 : int64_t(it->second));
      producers.push_back(it == copy_of.end() ? t : copies->copies()[it->second].second);
    }
    reducer_ = std::make_unique<dist::Reducer>(*comm_, std::move(params), ro, std::move(producers),
                                               [copies, which](size_t k) {
                                                 if (which[k] >= 0) copies->accumulate_grad(size_t(which[k]));
                                               });
  }
  if (cfg_.sync_bn)  // Note [Sync batch norm on its own communicator]
    nn::set_batch_norm_sync(model, std::make_shared<dist::SyncBatchNorm>(*sync_comm_, timeout_of(cfg_)));
  if (cfg_.comm_timeline && env_.rank == 0) {
    timeline_.emplace(run_dir + "/timeline.jsonl");
  }
}

void DataParallel::before_backward(bool last) { reducer_->prepare(last); }

// Note [Data parallel in a CUDA graph]
// With --cuda-graphs over NCCL every rank captures its training step, the reducer's
// all-reduces (and --sync-bn's all-gathers) included: each bucket's all-reduce is a branch of
// the graph forked from backward at the bucket's event and joined before the update, so the
// replay overlaps communication with backward as the eager step does
// (Note [Collectives in a CUDA graph] in distributed/communicator.h). NCCL requires every rank
// to capture the same collectives and launch the graphs together: the ranks decide to
// capture together (a rehearsal counts as ready only when it is on every rank:
// on_every_rank), and every rank meets the same batch shapes at the same steps (the sampler
// gives every rank as many samples), so they replay, fall back and capture again at the same
// steps. Each replay is watched whole by the communicators' watchdogs (after_replay), so a
// peer lost or silent during a replay is reported as in an eager step. Gloo (CPU processes)
// and --comm-timeline (its device times come from events recorded on the host around each
// bucket's all-reduce) run eagerly.
std::string DataParallel::capture_blocker() const {
  if (!device_.is_cuda()) return "data parallelism over Gloo (CPU processes; use --device cuda)";
  if (cfg_.comm_timeline) return "--comm-timeline (it times each eager step's buckets; drop it)";
  return "";
}

bool DataParallel::on_every_rank(bool mine) {
  std::vector<double> no = {mine ? 0.0 : 1.0};
  sum_over_ranks(no);
  return no[0] == 0.0;
}

void DataParallel::after_replay(const Stream& stream) {
  const std::string what = "a replayed training step's collectives";
  comm_->watch(stream, what + " (gradients)", timeout_of(cfg_));
  if (sync_comm_) sync_comm_->watch(stream, what + " (--sync-bn)", timeout_of(cfg_));
}

void DataParallel::after_backward(bool last) {
  if (last) reducer_->end_backward();
}

void DataParallel::before_optimizer_step() {
  reducer_->wait_for_gradients();
  for (const dist::StepTimeline& t : reducer_->take_timelines()) account(t);
}

// One step's timeline, once known (on CUDA a step or more later: Note [Two clocks] in
// distributed/reducer.h): into the overlap figure and --comm-timeline's file.
void DataParallel::account(const dist::StepTimeline& t) {
  if (std::strcmp(t.clock, "device") == 0) {  // Note [Stragglers] in train/straggler.h
    device_phases_[Phase::backward] += t.backward_end;
    if (t.wait_end >= t.backward_end) device_phases_[Phase::comm] += t.wait_end - t.backward_end;
    if (t.since_previous >= 0) device_phases_[Phase::forward] += t.since_previous;
    ++device_phases_.steps;
  }
  const double total = t.comm_seconds();
  if (total > 0) {
    ++overlap_.steps;
    overlap_.comm_seconds += total;
    overlap_.hidden_seconds += total * t.overlap();
    overlap_.last = t.overlap();
  }
  if (timeline_) write_timeline(t);
}

// Note [Timeline file]
// One JSON object per communicating step, what bench/dp_scaling_model.py needs to replay a
// step under another network. Times are seconds from the start of the step's last backward
// (Reducer::prepare), on the clock that `clock` names (Note [Two clocks] in distributed/reducer.h:
// "host" on CPU processes, "device" on GPUs):
//   before_backward_s: from the previous step's wait_end to this backward's start: the
//     optimizer step, loading and forward (and any log line, checkpoint or evaluation in
//     between; null on the first step);
//   backward_end_s: backward's end; wait_end_s: when the averaged gradients were there;
//   buckets, in launch order: bytes, ready (its last gradient was ready), launched (device:
//   started on the communication stream), completed (-1 where unknown: a failed call).
// Rank 0's view only: the other ranks' backward may end earlier or later.
void DataParallel::write_timeline(const dist::StepTimeline& t) {
  const std::vector<dist::Reducer::BucketInfo> info = reducer_->buckets();
  json::Value buckets = json::Value::array();
  for (size_t b = 0; b < info.size(); ++b) {
    json::Value x = json::Value::object();
    // What the all-reduce carries: the gradients' dtype, or --grad-reduce-dtype's (Note [Reduce dtype]).
    const DType carried = cfg_.grad_reduce_dtype == DType::bf16 ? DType::bf16 : info[b].dtype;
    x.set("bytes", info[b].numel * int64_t(dtype_size(carried)));
    x.set("ready", t.buckets[b].ready);
    x.set("launched", t.buckets[b].launched);
    x.set("completed", t.buckets[b].completed);
    buckets.push_back(std::move(x));
  }
  json::Value m = json::Value::object();
  m.set("step", ++timeline_steps_);
  m.set("world_size", env_.world_size);
  m.set("backend", comm_->backend());
  m.set("allreduce", dist::algo_name(cfg_.allreduce));
  m.set("clock", t.clock);
  m.set("before_backward_s", t.since_previous >= 0 ? json::Value(t.since_previous) : json::Value());
  m.set("backward_end_s", t.backward_end);
  m.set("wait_end_s", t.wait_end);
  m.set("buckets", std::move(buckets));
  timeline_->write(m);
}

// Rank 0's running statistics for every rank's evaluation: each rank's were updated from its
// own shards, and the single-process evaluation this must equal has one set.
void DataParallel::before_evaluation(nn::Module&) {
  const dist::flight::Purpose purpose("evaluation");
  dist::broadcast_from_rank0(*comm_, buffers_, timeout_of(cfg_));
}

// The sampler (data/loading/sampler.h) gives rank r positions r, r + W, ... of the padded order;
// positions at or past test_size are the padding, the last of each rank's list.
EvalShard DataParallel::eval_shard(int64_t test_size) const {
  const int64_t W = env_.world_size, r = env_.rank;
  return EvalShard{int(r), int(W), r < test_size ? (test_size - r + W - 1) / W : 0};
}

void DataParallel::sum_over_ranks(std::vector<double>& values) {
  if (values.empty()) return;
  Tensor t = Tensor::from_vector(values, {int64_t(values.size())}).to(comm_->device());
  comm_->all_reduce(t, dist::ReduceOp::sum, dist::AllReduceAlgo::library, timeout_of(cfg_)).wait();
  values = t.to_vector<double>();
}

void DataParallel::sum_eval_counts(EvalCounts& c) {
  // f64 holds every count exactly (< 2^53).
  std::vector<double> v = {c.loss_sum, double(c.n), double(c.top1), double(c.top5), double(c.nonfinite),
                           double(c.skipped)};
  const dist::flight::Purpose purpose("evaluation");
  sum_over_ranks(v);
  c.loss_sum = v[0];
  c.n = int64_t(v[1]);
  c.top1 = int64_t(v[2]);
  c.top5 = int64_t(v[3]);
  c.nonfinite = int64_t(v[4]);
  c.skipped = int64_t(v[5]);
}

namespace {
// FNV-1a over the bytes of every tensor, in order (on the host).
std::string fingerprint(const nn::NamedTensors& tensors) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : tensors) {
    const Tensor c = t.to(Device::cpu()).to(MemoryFormat::contiguous);
    const auto* p = static_cast<const unsigned char*>(c.raw_data());
    for (size_t i = 0, n = size_t(c.numel()) * dtype_size(c.dtype()); i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}
}  // namespace

// Note [Same weights at the end]
// Every rank applies the same averaged gradients to the same weights, so the ranks'
// parameters are bit-identical after every step; a rank that decided something alone (a
// skipped step, Note [Skipping together]) would break that silently, and rank 0's weights
// file would not be what the others trained. The last meeting compares a fingerprint of each
// rank's parameters with rank 0's (one copy to the host, once per run). Then the last
// barrier before rank 0's store goes away (distributed/rendezvous.h: join is safe as the last one).
void DataParallel::finish() {
  for (const dist::StepTimeline& t : reducer_->take_timelines(/*wait=*/true)) account(t);  // the last steps' (CUDA)
  const std::string mine = fingerprint(params_), rank0 = agree("final-weights", mine);
  RT_CHECK(mine == rank0, "data parallel: rank ", env_.rank, "'s weights differ from rank 0's at the end of training ",
           "(fingerprint ", mine, " vs ", rank0, "): the ranks stopped training the same model; this is a bug, ",
           "please report it with the command and logs/rank-*.log");
  dist::join(*store_.store, env_.rank, env_.world_size, timeout_of(cfg_));
}

}  // namespace rt::train
