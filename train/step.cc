#include "train/step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "base/error.h"
#include "data/transforms/batch_augment.h"
#include "engine/cuda_graph.h"
#include "engine/ops.h"
#include "engine/memory_tag.h"
#include "engine/nn/layers.h"
#include "engine/profiler.h"
#include "engine/stream.h"
#include "distributed/fault.h"
#include "train/step_graph.h"

namespace rt::train {

// Note [The training step as a CUDA graph]
// With --cuda-graphs on CUDA, forward, loss, backward and the update (MixedPrecision::step,
// then zero_grad) of a batch are captured once as a CUDA graph (engine/cuda_graph.h) and the
// later steps launch it: one host launch instead of one per kernel. The graph replays the
// same kernels in the same order on the same memory, so training is bit for bit the eager
// training. How:
//   - Every step of such a run queues its work on a stream of its own, which first waits for
//     the caller's stream and which the caller's stream waits for after it (a capture needs a
//     stream other than the legacy default one); the feeder's batch is taken on it too.
//   - The first step runs eagerly: it makes the convolution plans, the optimizer's state and
//     its multi-tensor tables.
//   - The batch is copied into static input and label buffers (made from the first batch
//     after it), which the graph reads. Memory the step allocates comes from the graph's pool
//     (Note [Graph pools] in engine/caching_allocator.h).
//   - The optimizer's multi-tensor tables hold the gradients' addresses; they are uploaded
//     (through host staging and events, which a capture refuses) whenever the list changes,
//     and the gradients are allocated anew every step. So the capture must see the addresses
//     the step before it had: before capturing, the step runs eagerly in the pool
//     ("rehearsed", CudaGraph::rehearse) until a rehearsal takes no new segment; the pool then
//     starts each run with the same free segments and the allocator hands the same requests
//     the same blocks, so the capture meets the tables as the rehearsal left them.
//   - Kernel arguments are baked at capture; the learning rate is not among them: SGD's and
//     LARS's updates read it from a device scalar that every step fills with the schedule's
//     lr before it runs (Note [The learning rate in device memory] in optim/optimizer.h; a
//     fill launch only when the value changed), so every schedule (step, cosine, poly, a
//     warm-up) replays one graph. Momentum, weight decay and the rest do not change during a
//     run. (Were the lr an argument, each change would cost a capture, the host time of one
//     eager step: this run's first version recaptured on every change and ran cosine and poly
//     eagerly.) AdamW's scalars that change every step (its bias corrections) are read from
//     device memory the same way: prepare_device_step() writes the coming step's before every
//     step, and count_replayed_step() advances its host step counts after a replay
//     (Note [AdamW's scalars in device memory] in optim/adamw.cc).
//   - A batch of another shape (the epoch's last, partial batch) runs eagerly, outside the
//     pool. Its gradients' addresses then sit in the tables' device copies, which the graph
//     reads without uploading: the next full batch is rehearsed again in the pool (the tables
//     get the pool's addresses back) and the graph captured again after it. So an epoch with a
//     partial batch has, past its first steps, two eager steps and a capture more than those.
//   - Batch norm counts its batches on the host (num_batches_tracked, a host read the capture
//     refuses): during the capture its forward does not count, and every batch norm counts
//     once after each replay, as the eager forward would (BatchNorm2d::count_in_forward).
//   - fp16's loss scaler keeps its scale and its finding in device memory and a replayed step
//     skips an update whose gradients overflowed on the device
//     (Note [Loss scaling in a captured step] in optim/grad_scaler.cc). A rehearsal that
//     overflowed made no optimizer state (its update was skipped on the host), so the capture
//     waits for a rehearsal that stepped, and for one that uploaded no multi-tensor table (SGD's
//     first momentum step is keyed apart from the later ones: rehearse_step).
//   - The loss stays on the device: the graph writes it into a pool block, which the loss
//     meter adds after the replay, on the same stream, as the eager step adds its loss
//     (Note [Loss on the device] in train/loss_meter.h).
//   - Mixed precision's compute copies are refreshed from the masters by the forward when the
//     host thinks them stale (MixedPrecision's fresh flag, cleared by step()). A replay updates
//     the masters without step() running on the host, so the flag is cleared after every
//     replay and before every capture: the graph always holds the refresh, and an evaluation
//     between replays refreshes the copies for itself. (Without this, an evaluation marked the
//     copies fresh, the next recapture left the refresh out, and bf16 training with graphs
//     left the eager trajectory: found by the bf16 case of tests/train/cuda_graphs_test.)
// What cannot be captured, or gains nothing, runs eagerly, said once on stderr (graph_blocker
// below): several micro-batches (--accum-steps: the step's loop would need one graph per
// micro-batch and the reducer's hooks), --skip-nonfinite (reads every loss and gradient on the host), host-drawn
// augmentation (--mixup-alpha, --cutmix-alpha, --random-erase: boxes and mixing weights are
// drawn on the host per batch and would be baked), data parallelism over Gloo
// or with --comm-timeline, and the CPU. Data parallelism over NCCL is captured whole, its
// all-reduces overlapping backward as branches of the graph, every rank capturing at the same
// step (Note [Data parallel in a CUDA graph] in train/data_parallel.cc). In the kernel lab
// (Note [Graph launches in the lab] in cuda_emu/perf.cc) a replayed
// step counts each of its kernels as a launch that ran on the device (graph_node_launches)
// and the step as one host launch (graph_launches); `host_launches` is what the host paid for.
std::string graph_blocker(const TrainConfig& cfg) {
  if (cfg.loop.accum_steps > 1) return "--accum-steps " + std::to_string(cfg.loop.accum_steps) + " (use 1)";
  if (cfg.loop.skip_nonfinite) return "--skip-nonfinite (drop it)";
  if (cfg.data.mixup_alpha > 0) return "--mixup-alpha (host-drawn mixing weights; use 0)";
  if (cfg.data.cutmix_alpha > 0) return "--cutmix-alpha (host-drawn boxes; use 0)";
  if (cfg.data.random_erase > 0) return "--random-erase (host-drawn boxes; use 0)";
  return "";
}

// The captured step of one input shape (Note [The training step as a CUDA graph]).
struct TrainStep::Graphed {
  Stream stream;
  Event entered, left;  // the caller's stream -> the step's, and back
  bool warmed = false;  // the first step ran eagerly
  Tensor input, labels;  // static buffers: the graph's input
  CudaGraph graph;
  Tensor loss;           // the graph's output: the step's loss
  Tensor lr;             // (1,) f64: the optimizer's device lr (Note [The learning rate in device memory])
  double lr_filled = std::numeric_limits<double>::quiet_NaN();  // the value lr holds (NaN: none yet)
  bool current = false;  // the graph may be replayed (nothing ran eagerly since its capture)
  bool ready = false;    // the last run in the pool took no segment: a capture now meets its addresses
  int64_t captures = 0, replays = 0, eager = 0;  // steps, for the summary on stderr
  explicit Graphed(Device d) : stream(Stream::create(d)), entered(d), left(d) {}
};

TrainStep::TrainStep(nn::Module& model, optim::Optimizer& opt, MixedPrecision& mp, ParallelContext& par,
                     const LoopConfig& loop, double label_smoothing, Device device, const StepOptions& options)
    : model_(model),
      opt_(opt),
      mp_(mp),
      par_(par),
      accum_(loop.accum_steps),
      label_smoothing_(label_smoothing),
      options_(options),
      skip_nonfinite_(loop.skip_nonfinite),
      loss_on_device_(device.is_cuda() && !loop.skip_nonfinite),
      losses_(!loss_on_device_) {
  if (skip_nonfinite_) good_ = TrainState::take(model_, opt_, mp_);
  if (!options_.cuda_graphs) return;
  std::string why = options_.graph_blocker;
  if (why.empty() && !device.is_cuda()) why = "--device " + device.str() + " (CUDA graphs need --device cuda)";
  if (why.empty()) why = par_.capture_blocker();
  if (why.empty() && mp_.loss_scaling() && !opt_.takes_skip_flag())
    why = "fp16's loss scaler with this optimizer (a step whose gradients overflow cannot be skipped inside a "
          "graph; use sgd, lars or adamw, or --precision bf16)";
  if (why.empty() && !opt_.takes_device_lr())
    why = "the optimizer (it takes no learning rate from device memory; use sgd, lars or adamw)";

  if (!why.empty()) {
    std::fprintf(stderr, "--cuda-graphs: the training step runs eagerly because of %s\n", why.c_str());
    return;
  }
  graphed_ = std::make_unique<Graphed>(device);
  {
    const StreamGuard on(graphed_->stream);  // the stream that fills it and the one that reads it
    graphed_->lr = Tensor::zeros({1}, DType::f64, device);
  }
  opt_.set_device_lr(graphed_->lr);
}

TrainStep::~TrainStep() {
  if (!graphed_) return;
  opt_.set_device_lr(Tensor());  // nobody fills it any more
  const Graphed& g = *graphed_;
  if (g.replays + g.captures + g.eager > 0)
    std::fprintf(stderr, "--cuda-graphs: %ld steps replayed, %ld captured, %ld eager\n", long(g.replays),
                 long(g.captures), long(g.eager));
}

StepOutcome TrainStep::run(data::DeviceFeeder& feed, const Progress& p) {
  // The phases' times (Note [Stragglers] in train/straggler.h): what the named phases did not
  // take of the step is "other".
  const auto t0 = std::chrono::steady_clock::now();
  const double named = phases_.total();
  dist::inject_step_fault(par_.rank(), p.step + 1);  // tests only: RINGTAPE_FAULT=kill:RANK:STEP
  const StepOutcome out = graphed_ ? run_on_graph_stream(feed, p) : run_eager(feed, p);
  const double all = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  phases_[Phase::other] += std::max(0.0, all - (phases_.total() - named));
  if (out.complete) ++phases_.steps;
  return out;
}

StepOutcome TrainStep::run_on_graph_stream(data::DeviceFeeder& feed, const Progress& p) {
  Graphed& g = *graphed_;
  const Stream caller = Stream::current(g.stream.device());
  g.entered.record(caller);
  g.entered.block(g.stream);
  StepOutcome out;
  {
    const StreamGuard on(g.stream);
    out = run_graphed(feed, p);
  }
  g.left.record(g.stream);
  g.left.block(caller);
  return out;
}

Tensor TrainStep::step_core(const Tensor& input, const Tensor& labels) {
  Tensor loss;
  {
    const MemoryTagScope tag(MemoryTag::activations);
    loss = cross_entropy(mp_.forward(input), labels, label_smoothing_);
  }
  {
    const MemoryTagScope tag(MemoryTag::gradients);
    par_.before_backward(true);
    mp_.backward(loss);
    par_.after_backward(true);
  }
  const MemoryTagScope tag(MemoryTag::optimizer_state);
  par_.before_optimizer_step();
  core_stepped_ = mp_.step(opt_, options_.clip_grad_norm);
  opt_.zero_grad();
  return loss;
}

StepOutcome TrainStep::run_graphed(data::DeviceFeeder& feed, const Progress& p) {
  Graphed& g = *graphed_;
  // The lr this step's update reads, on the step's stream ahead of it (an eager step's too).
  if (!(opt_.lr() == g.lr_filled)) {
    g.lr.fill_(opt_.lr());
    g.lr_filled = opt_.lr();
  }
  opt_.prepare_device_step();  // and what else it reads from device memory (AdamW's scalars)
  if (!g.warmed) {
    g.warmed = true;
    ++g.eager;
    return run_eager(feed, p);
  }
  using prof::EventKind;
  StepOutcome out;
  std::optional<data::DeviceBatch> b;
  {
    const prof::RangeScope phase(EventKind::phase, "data");
    const PhaseScope timed(phases_, Phase::data, par_.rank());
    b = feed.next();
  }
  if (!b) {
    losses_.end_step(false);
    return out;
  }
  out.samples = b->input.size(0);
  out.complete = stepped_ = true;
  if (!g.input.defined()) {
    g.input = b->input.clone();
    g.labels = b->labels.clone();
  }
  const prof::RangeScope phase(EventKind::phase, "step");
  Tensor loss;
  if (b->input.shape() != g.input.shape() || b->labels.shape() != g.labels.shape()) {
    loss = step_core(b->input, b->labels);  // eagerly, outside the pool: the tables now hold other addresses
    g.current = g.ready = false;
    ++g.eager;
  } else {
    g.input.copy_(b->input);
    g.labels.copy_(b->labels);
    b.reset();
    if (g.graph.captured() && g.current) {
      g.graph.replay(g.stream);
      par_.after_replay(g.stream);
      opt_.count_replayed_step();  // the capture's step() counted for itself
      ++g.replays;
    } else if (g.ready) {
      g.loss = Tensor();  // the pool as the last rehearsal or capture found it: every block free
      // The graph's update changes the masters without MixedPrecision::step running on the host:
      // a capture must hold the compute copies' refresh whatever an evaluation in between left
      // (it refreshes them and marks them fresh).
      mp_.weights_changed();
      capture_step(g.graph, g.stream, model_, [&] { g.loss = step_core(g.input, g.labels); });
      g.current = true;
      g.graph.replay(g.stream);
      par_.after_replay(g.stream);
      ++g.captures;
    } else {
      g.loss = Tensor();  // as a capture starts: every block of the pool free
      g.ready = rehearse_step(g.graph, g.stream, [&] { loss = step_core(g.input, g.labels); });
      // A rehearsal whose gradients overflowed (fp16) skipped the update on the host, so the
      // optimizer may still lack its state, which a capture would then make at every replay.
      g.ready = g.ready && core_stepped_;
      g.ready = par_.on_every_rank(g.ready);  // Note [Data parallel in a CUDA graph] in train/data_parallel.cc
      ++g.eager;
    }
    if (g.current) {
      loss = g.loss;
      mp_.weights_changed();  // the replay updated the masters: the copies are stale
      count_replayed_step(model_);
    }
  }
  losses_.add(loss, 1);
  losses_.end_step(true);
  return out;
}

StepOutcome TrainStep::run_eager(data::DeviceFeeder& feed, const Progress& p) {
  StepOutcome out;
  std::string skip_why;  // why this step is skipped (--skip-nonfinite); "" while it stands
  // Phases (prof::RangeScope): named ranges in NVTX and in a profile (Note [Profiler scopes]).
  using prof::EventKind;
  for (int64_t micro = 0; micro < accum_; ++micro) {
    std::optional<data::DeviceBatch> b;
    {
      const prof::RangeScope phase(EventKind::phase, "data");
      const PhaseScope timed(phases_, Phase::data, par_.rank());
      b = feed.next();
    }
    if (!b) {  // the end of the epoch: a partial accumulation is dropped, like drop_last
      losses_.end_step(false);
      opt_.zero_grad();
      return out;
    }
    out.samples += b->input.size(0);
    Tensor loss;
    std::optional<double> l;
    {
      const prof::RangeScope phase(EventKind::phase, "forward");
      const PhaseScope timed(phases_, Phase::forward, par_.rank());
      const MemoryTagScope tag(MemoryTag::activations);  // what the allocator attributes (engine/memory_tag.h)
      loss = loss_of(*b);
      l = losses_.add(loss, accum_);  // nullopt: it stays on the device
    }
    if (skip_why.empty()) {
      std::string mine;  // why this rank would skip
      if (l && !std::isfinite(*l)) mine = nonfinite_loss(*l, b->input, p);  // throws without --skip-nonfinite
      skip_why = skip_nonfinite_ ? agree_on_skip(mine) : mine;
    }
    if (!skip_why.empty()) continue;  // the rest of a skipped step only reads its batches
    if (accum_ > 1) loss = mul(loss, 1.0 / double(accum_));
    const bool last = micro + 1 == accum_;
    const prof::RangeScope phase(EventKind::phase, "backward");
    const PhaseScope timed(phases_, Phase::backward, par_.rank());
    const MemoryTagScope tag(MemoryTag::gradients);
    par_.before_backward(last);
    mp_.backward(loss);  // the gradients sum over the micro-batches
    par_.after_backward(last);
  }
  const prof::RangeScope phase(EventKind::phase, "optimizer");
  const MemoryTagScope tag(MemoryTag::optimizer_state);
  out.complete = stepped_ = true;
  std::optional<TrainState> after;  // --skip-nonfinite: the state this step made, if it stands
  if (skip_why.empty()) {
    {
      const PhaseScope timed(phases_, Phase::comm, par_.rank());
      par_.before_optimizer_step();
    }
    const PhaseScope timed(phases_, Phase::optimizer, par_.rank());
    std::string mine = nonfinite_gradients();
    if (mine.empty()) mp_.step(opt_, options_.clip_grad_norm);
    opt_.zero_grad();
    if (mine.empty()) mine = nonfinite_update(after);
    if (skip_nonfinite_) skip_why = agree_on_skip(mine);
  } else {
    opt_.zero_grad();
  }
  if (skip_why.empty() && after) good_ = std::move(after);
  losses_.end_step(skip_why.empty());
  if (!skip_why.empty()) {
    good_->restore(model_, opt_, mp_);
    out.skipped = true;
    std::fprintf(stderr, "step %ld skipped (--skip-nonfinite; weights and optimizer state unchanged): %s\n",
                 p.step + 1, skip_why.c_str());
  }
  return out;
}

StepOptions step_options(const TrainConfig& cfg) {
  StepOptions o;
  o.seed = cfg.seed;
  o.mixup_alpha = cfg.data.mixup_alpha;
  o.cutmix_alpha = cfg.data.cutmix_alpha;
  o.random_erase = cfg.data.random_erase;
  o.clip_grad_norm = cfg.optimizer.clip_grad_norm;
  o.cuda_graphs = cfg.compute.cuda_graphs;
  if (o.cuda_graphs) o.graph_blocker = graph_blocker(cfg);
  return o;
}

// Note [Batch augmentation order]
// As torchvision's recipe applies them: RandomErasing is the last transform of each image
// (after normalisation: an erased pixel is 0, the mean colour), then the batch's
// collate_fn chooses mixup or cutmix and mixes the images with their roll by one and the
// one-hot targets with theirs. Here both run on the training device on the normalised batch:
// image n of batch k of an epoch draws its erase box from (seed, epoch, k * N + n), the batch
// its mix from (seed, epoch, k) (data/transforms/batch_augment.h), so a resumed run draws the same. A
// mixed batch's loss is the cross entropy with the mixed targets (label smoothing applied to
// them, as CrossEntropyLoss does with probability targets).
Tensor TrainStep::loss_of(data::DeviceBatch& b) {
  const int64_t n = b.input.size(0), h = b.input.size(2), w = b.input.size(3);
  if (options_.random_erase > 0) {
    std::vector<ImageBox> boxes(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      Generator g = data::erase_generator(options_.seed, b.epoch, b.index * n + i);
      boxes[size_t(i)] = data::draw_erase(options_.random_erase, h, w, g);
    }
    erase_boxes_(b.input, boxes);
  }
  if (options_.mixup_alpha <= 0 && options_.cutmix_alpha <= 0)
    return cross_entropy(mp_.forward(b.input), b.labels, label_smoothing_);
  Generator g = data::mix_generator(options_.seed, b.epoch, b.index);
  const data::MixDraw d = data::draw_mix(options_.mixup_alpha, options_.cutmix_alpha, g, h, w);
  Tensor input = b.input;
  if (d.kind == data::MixKind::mixup) input = mix_with_rolled(b.input, d.lam, ImageBox{0, h, 0, w});
  if (d.kind == data::MixKind::cutmix) input = mix_with_rolled(b.input, 0.0, d.box);
  const Tensor logits = mp_.forward(input);
  return cross_entropy_soft(logits, mix_targets(b.labels, logits.size(1), d.lam, logits.dtype()), label_smoothing_);
}

// Without --skip-nonfinite this throws, naming the cause; with it, returns why the step is
// skipped.
std::string TrainStep::nonfinite_loss(double loss, const Tensor& input, const Progress& p) const {
  const std::string cause = nonfinite_loss_cause(input, model_, stepped_, skip_nonfinite_);
  RT_CHECK(skip_nonfinite_, "loss is ", loss, " at step ", p.step + 1, " (epoch ", p.epoch, "): ", cause);
  return "loss " + std::to_string(loss) + ": " + cause;
}

std::string TrainStep::nonfinite_gradients() const {
  // fp16's loss scaler checks the gradients itself (and skips on overflow).
  if (!skip_nonfinite_ || mp_.loss_scaling()) return "";
  const auto bad = first_nonfinite(gradients(opt_));
  return bad ? "the gradient of '" + *bad + "' is NaN or Inf" : "";
}

std::string TrainStep::nonfinite_update(std::optional<TrainState>& after) const {
  if (!skip_nonfinite_) return "";
  after = TrainState::take(model_, opt_, mp_);
  if (const auto bad = after->first_nonfinite()) return "the step made '" + *bad + "' NaN or Inf";
  return "";
}

// Note [Skipping together]
// In a data-parallel run a skip is decided by every rank at once. A rank that skipped alone
// would leave the others waiting in the gradient all-reduce of a backward it never runs (until
// --timeout), and a skip decided by state that differs per rank (batch-norm running
// statistics, a NaN input in one rank's shard) would restore one rank's weights and not the
// others'. So at each decision (after each micro-batch's forward, and after the update) every
// rank says whether it would skip, one small all-reduce later all know, and all skip if any
// would: the weights stay the same on every rank. The cost is one all-reduce of a few bytes
// per micro-batch, with --skip-nonfinite only.
std::string TrainStep::agree_on_skip(const std::string& mine) {
  if (par_.world_size() == 1) return mine;
  std::vector<double> would(size_t(par_.world_size()), 0.0);  // [rank]: 1 if that rank would skip
  would[size_t(par_.rank())] = mine.empty() ? 0.0 : 1.0;
  par_.sum_over_ranks(would);
  if (!mine.empty()) return mine;
  std::string ranks;
  int n = 0;
  for (size_t r = 0; r < would.size(); ++r)
    if (would[r] != 0.0) ranks += (n++ ? ", " : "") + std::to_string(r);
  if (n == 0) return "";
  return std::string(n == 1 ? "rank " : "ranks ") + ranks + " found NaN or Inf (" + (n == 1 ? "its" : "their") +
         " log says where); every rank skips the step";
}

double TrainStep::window_loss(int64_t first_step, const Progress& p) const {
  const double sum = losses_.window_sum();  // on CUDA the host waits here (Note [Loss on the device])
  if (!loss_on_device_ || std::isfinite(sum)) return sum;
  // Read each step, a NaN/Inf loss was found at its step; kept on the device, it is found
  // here, at the latest.
  const auto bad = first_nonfinite(model_.named_parameters());
  RT_FAIL("loss is ", sum, " in steps ", first_step, "-", p.step, " (epoch ", p.epoch,
          "; on CUDA the loss is read at each --print-freq step and before a checkpoint): ",
          bad ? "'" + *bad + "' is now NaN or Inf: training diverged (or a batch held NaN/Inf). Lower --lr, add "
                    "--lr-warmup-epochs, or pass --skip-nonfinite, which checks every step and names the cause"
              : "the weights are finite: an input batch held NaN or Inf, or the loss overflowed; "
                "--skip-nonfinite checks every step and names the cause");
}

}  // namespace rt::train
