#include "train/step.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "base/error.h"
#include "data/batch_augment.h"
#include "engine/ops.h"
#include "engine/memory_tag.h"
#include "engine/profiler.h"

namespace rt::train {

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
}

StepOutcome TrainStep::run(data::DeviceFeeder& feed, const Progress& p) {
  StepOutcome out;
  std::string skip_why;  // why this step is skipped (--skip-nonfinite); "" while it stands
  // Phases (prof::RangeScope): named ranges in NVTX and in a profile (Note [Profiler scopes]).
  using prof::EventKind;
  for (int64_t micro = 0; micro < accum_; ++micro) {
    std::optional<data::DeviceBatch> b;
    {
      const prof::RangeScope phase(EventKind::phase, "data");
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
    par_.before_optimizer_step();
    std::string mine = nonfinite_gradients();
    if (mine.empty()) out.overflow = !mp_.step(opt_, options_.clip_grad_norm);
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
  return o;
}

// Note [Batch augmentation order]
// As torchvision's recipe applies them: RandomErasing is the last transform of each image
// (after normalisation: an erased pixel is 0, the mean colour), then the batch's
// collate_fn chooses mixup or cutmix and mixes the images with their roll by one and the
// one-hot targets with theirs. Here both run on the training device on the normalised batch:
// image n of batch k of an epoch draws its erase box from (seed, epoch, k * N + n), the batch
// its mix from (seed, epoch, k) (data/batch_augment.h), so a resumed run draws the same. A
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
