// The training loop: flags -> dataset, model, optimizer and schedule -> steps with logging,
// per-epoch evaluation and checkpoints -> model.safetensors.
//
// Note [Exact resume]: on the CPU every step is a deterministic function of the weights,
// the optimizer state and the batch (fixed OpenMP partitioning for a given thread count),
// and the batch is a pure function of (seed, epoch, batch index). A checkpoint therefore
// only records where training stands; resuming from it replays the same batches and
// reproduces the uninterrupted run bit for bit, also from the middle of an epoch.
//
// Every forward, backward and optimizer step goes through MixedPrecision (train/precision.h,
// Note [Precision]); with --precision fp32 it adds nothing to the plain step.
#include "train/trainer.h"

#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <set>

#include "data/dataset.h"
#include "data/device_feeder.h"
#include "data/loader.h"
#include "engine/autograd.h"
#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "engine/ops.h"
#include "models/registry.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "train/checkpoint.h"
#include "train/interrupt.h"
#include "train/loss_meter.h"
#include "train/metrics.h"
#include "train/nonfinite.h"
#include "train/output_dir.h"
#include "train/precision.h"
#include "train/train_flags.h"

namespace rt::train {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// Flags that shape the trajectory: resuming with a different value would not continue the
// same run.
const std::set<std::string> kTrajectoryFlags = {
    "model", "width", "small-stem", "num-classes", "dataset", "batch-size", "epochs", "optimizer", "lr",
    "momentum", "nesterov", "weight-decay", "no-bn-bias-decay", "label-smoothing", "lr-scheduler",
    "lr-warmup-epochs", "lr-warmup-decay", "lr-step-size", "lr-milestones", "lr-gamma", "lr-min", "lr-power",
    "accum-steps", "seed", "no-shuffle", "augment", "zero-init-residual", "threads", "synthetic-size",
    "stem-stride", "memory-format", "train-crop-size", "precision"};

// --device auto: the GPU when one is present (cuda:0), else the CPU.
Device pick_device(const std::string& s) {
  if (s == "auto") {
    const Device d = default_device();
    std::printf("device auto: %s\n", d.is_cuda() ? "cuda:0 (a CUDA device is present)" : "cpu (no CUDA device)");
    return d;
  }
  const Device d = Device::parse(s);
  if (d.is_cuda()) allocator_for(d);  // a clear error when the device does not exist
  return d;
}

// --precision on the chosen device, and the CUDA math switches that go with it.
Precision pick_precision(const cli::Flags& f, Device device) {
  const Precision p = resolve_precision(f.str("precision"), device);
  const bool benchmark = f.has("cudnn-benchmark") && f.boolean("cudnn-benchmark");
  const bool runtime_compiled =  // validate_flags allows it only with --cudnn-benchmark
      f.has("cudnn-benchmark-runtime-compiled") && f.boolean("cudnn-benchmark-runtime-compiled");
  if (f.str("precision") == "auto")
    std::printf("precision auto: %s (%s)\n", precision_name(p), auto_precision_reason(device).c_str());
  if (device.is_cuda()) {
    set_cuda_math(p, benchmark, runtime_compiled);
  } else {
    if (p == Precision::tf32) std::printf("precision tf32: the CPU has no TF32; it computes in fp32\n");
    if (benchmark) std::printf("--cudnn-benchmark ignored on the CPU\n");
  }
  return p;
}

data::DatasetOptions dataset_options(const cli::Flags& f) {
  data::DatasetOptions o;
  if (f.str("dataset") == "synthetic") {
    const auto [n, c, h, w] = *parse_synthetic_size(f.str("synthetic-size"));  // validate_flags checked it
    o.synthetic.size = n;
    o.synthetic.image_shape = {c, h, w};
    o.synthetic.seed = uint64_t(f.integer("seed"));
    if (f.integer("num-classes") > 0) o.synthetic.num_classes = f.integer("num-classes");
  }
  // "tensors" files: with --num-classes every label must be below it, checked as the file
  // opens (naming it); 0 = derived from the labels (Note [Label range], data/dataset.h).
  o.num_classes = std::max<int64_t>(f.integer("num-classes"), 0);
  // Small in-memory datasets: padding 2 for 28-px images, 4 for 32-px ones.
  o.augment.enabled = f.has("augment") && f.boolean("augment");
  o.augment.pad = f.str("dataset") == "fashion-mnist" ? 2 : 4;
  o.augment.seed = uint64_t(f.integer("seed"));
  o.image_folder.train_crop_size = int(f.integer("train-crop-size"));
  o.image_folder.val_resize_size = int(f.integer("val-resize-size"));
  o.image_folder.val_crop_size = int(f.integer("val-crop-size"));
  o.image_folder.seed = uint64_t(f.integer("seed"));
  o.image_folder.cache_dir = f.str("cache-dir");
  return o;
}

struct Setup {
  std::unique_ptr<data::Dataset> train_set, test_set;
  std::shared_ptr<nn::Module> model;
  Device device;
  Precision precision = Precision::fp32;
  MemoryFormat format = MemoryFormat::channels_last;
};

Setup build(const cli::Flags& f, bool need_train) {
  if (f.integer("threads") > 0) omp_set_num_threads(int(f.integer("threads")));
  Setup s;
  s.device = pick_device(f.str("device"));
  s.precision = pick_precision(f, s.device);
  const data::DatasetOptions dopt = dataset_options(f);
  if (need_train) s.train_set = data::open_dataset(f.str("dataset"), f.str("data-path"), "train", dopt);
  s.test_set = data::open_dataset(f.str("dataset"), f.str("data-path"), "test", dopt);
  const data::Dataset& ref = need_train ? *s.train_set : *s.test_set;
  const Shape img = ref.image_shape();
  // The architecture follows the training image size, also in `ringtape eval` (whose
  // ImageNet evaluation crop may sit on the other side of the threshold).
  const int64_t train_px = f.str("dataset") == "imagenet" ? f.integer("train-crop-size") : std::max(img[1], img[2]);
  const bool small = train_px <= 64;
  models::ModelOptions mo;
  mo.num_classes = f.integer("num-classes") > 0 ? f.integer("num-classes") : ref.num_classes();
  // A label the model has no output for is an error now, not mid-epoch (or never).
  if (s.train_set) data::check_labels(*s.train_set, mo.num_classes);
  data::check_labels(*s.test_set, mo.num_classes);
  mo.in_channels = img[0];
  if (f.str("width") == "auto") {
    mo.width = small ? 16 : 64;
  } else {
    mo.width = std::stol(f.str("width"));  // validate_flags checked it
  }
  mo.small_stem = f.str("small-stem") == "auto" ? small : f.str("small-stem") == "true";
  if (mo.small_stem)
    mo.stem_stride = f.str("stem-stride") == "auto" ? (train_px <= 28 ? 2 : 1)
                                                     : int(std::stoi(f.str("stem-stride")));
  else if (f.str("stem-stride") == "2")
    throw cli::UsageError("--stem-stride 2 needs the small stem, which --small-stem auto leaves off for " +
                          std::to_string(train_px) + "-px images; add --small-stem true");
  s.format = f.str("memory-format") == "contiguous" ? MemoryFormat::contiguous : MemoryFormat::channels_last;
  if (need_train) {
    mo.zero_init_residual = f.boolean("zero-init-residual");
    mo.seed = uint64_t(f.integer("seed"));
  }
  s.model = models::make_model(f.str("model"), mo);
  std::printf("model %s: width %ld, %s stem, %ld classes, %ld input channels, %.2fM parameters, %s, %s\n",
              f.str("model").c_str(), mo.width,
              !mo.small_stem ? "imagenet" : mo.stem_stride == 1 ? "small stride-1" : "small stride-2",
              mo.num_classes, mo.in_channels, double(s.model->num_parameters()) / 1e6, format_name(s.format),
              precision_name(s.precision));
  return s;
}

struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;
  int64_t n = 0;
  int64_t skipped = 0;    // unreadable images replaced
  int64_t nonfinite = 0;  // examples with a NaN/Inf logit (counted as wrong)
  bool interrupted = false;
};

data::LoaderOptions loader_options(const cli::Flags& f, Device device) {
  data::LoaderOptions lo;
  lo.workers = int(f.integer("workers"));
  lo.strict = f.boolean("strict-images");
  lo.pin_memory = device.is_cuda();
  return lo;
}

// `interrupt` (training only): a signal ends the evaluation between batches, unfinished.
EvalResult evaluate(nn::Module& model, MixedPrecision& mp, const data::Dataset& set, const cli::Flags& f,
                    Device device, MemoryFormat format, const InterruptHandler* interrupt = nullptr) {
  NoGradGuard ng;
  model.eval();
  data::SamplerOptions so;
  so.shuffle = false;
  data::Loader loader(set, data::Sampler(set.size(), f.integer("batch-size"), so), loader_options(f, device));
  data::DeviceFeeder feed(loader, device, format, mp.input_dtype());
  EvalResult r;
  int64_t top1 = 0, top5 = 0;
  double loss_sum = 0;
  feed.start_epoch(0, 0);
  while (auto b = feed.next()) {
    if (interrupt && interrupt->signal()) {
      r.interrupted = true;
      break;
    }
    const Tensor logits = mp.forward(b->input);
    const int64_t n = b->input.size(0);
    loss_sum += cross_entropy(logits, b->labels, f.number("label-smoothing")).item() * double(n);
    const Tensor host = logits.to(Device::cpu()).to(DType::f32);
    topk_hits(host.data<float>(), b->host_labels.data<int64_t>(), n, host.size(1), &top1, &top5, &r.nonfinite);
    r.n += n;
  }
  r.skipped = loader.skipped_in_epoch();
  model.train();
  r.loss = loss_sum / double(std::max<int64_t>(r.n, 1));
  r.top1 = 100.0 * double(top1) / double(std::max<int64_t>(r.n, 1));
  r.top5 = 100.0 * double(top5) / double(std::max<int64_t>(r.n, 1));
  return r;
}

// ", 3 with NaN/Inf logits (counted as wrong)" when there are some.
std::string nonfinite_note(int64_t n) {
  return n == 0 ? "" : ", " + std::to_string(n) + " with NaN/Inf logits (counted as wrong)";
}

std::string default_output_dir(const cli::Flags& f) {
  char stamp[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&t));
  return "runs/" + f.str("dataset") + "-" + f.str("model") + "-" + stamp;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const cli::Flags& f, const nn::Module& model) {
  if (f.str("optimizer") == "adamw") {
    optim::AdamWOptions o;
    o.lr = f.number("lr");
    o.weight_decay = f.number("weight-decay");
    o.no_decay_1d = f.boolean("no-bn-bias-decay");
    return optim::make_adamw(model.named_parameters(), o);
  }
  optim::SgdOptions o;
  o.lr = f.number("lr");
  o.momentum = f.number("momentum");
  o.nesterov = f.boolean("nesterov");
  o.weight_decay = f.number("weight-decay");
  o.no_decay_1d = f.boolean("no-bn-bias-decay");
  return optim::make_sgd(model.named_parameters(), o);
}

std::string fmt_eta(double s) {
  char b[32];
  const long t = long(s);
  std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return b;
}

// "2.3017"; a NaN as `nan_word` ("n/a" for a log window whose steps were all skipped).
std::string fmt_loss(double l, const char* nan_word = "nan") {
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", l);
  return std::isnan(l) ? nan_word : b;
}

// The training steps between two log lines.
struct LogWindow {
  double loss_sum = 0;  // over the steps that stood (from the LossMeter, at the log line)
  int64_t steps = 0, skipped = 0, overflow_skips = 0, samples = 0;

  // Mean loss of the steps that stood; NaN when every one was skipped (written as null).
  double mean_loss() const { return steps > skipped ? loss_sum / double(steps - skipped) : NAN; }
};

// A training log line and its metrics.jsonl record, for the steps of window `w`.
void log_train(MetricsLog& metrics, const Progress& p, int64_t max_steps, double lr, const LogWindow& w, double ips,
               double eta, const MixedPrecision& mp, bool skip_nonfinite) {
  const double mean_loss = w.mean_loss();
  std::printf("epoch %ld step %ld/%ld  loss %s  lr %.5f  %.1f img/s  eta %s", p.epoch, p.step, max_steps,
              fmt_loss(mean_loss, "n/a").c_str(), lr, ips, fmt_eta(eta).c_str());
  if (w.skipped > 0) std::printf("  %ld of %ld step(s) skipped on NaN/Inf (--skip-nonfinite)", w.skipped, w.steps);
  if (mp.loss_scaling())
    std::printf("  loss scale %g (%ld step(s) skipped on inf/NaN gradients)", mp.loss_scale(), w.overflow_skips);
  std::printf("\n");
  std::fflush(stdout);
  json::Value m = json::Value::object();
  m.set("type", "train");
  m.set("epoch", p.epoch);
  m.set("step", p.step);
  m.set("loss", mean_loss);  // null when every step was skipped
  m.set("lr", lr);
  m.set("img_per_s", ips);
  m.set("eta_s", eta);
  if (skip_nonfinite) m.set("skipped_steps", w.skipped);
  if (mp.loss_scaling()) {
    m.set("loss_scale", mp.loss_scale());
    m.set("overflow_skips", w.overflow_skips);
  }
  metrics.write(m);
}

// The end-of-epoch evaluation's line and record; `skipped_train`: unreadable training images.
void log_eval(MetricsLog& metrics, const Progress& p, const EvalResult& e, int64_t skipped_train) {
  std::printf("epoch %ld eval: loss %s  top-1 %.2f%%  top-5 %.2f%%  (%ld images%s)\n", p.epoch,
              fmt_loss(e.loss).c_str(), e.top1, e.top5, e.n, nonfinite_note(e.nonfinite).c_str());
  if (skipped_train > 0 || e.skipped > 0)
    std::printf("epoch %ld: %ld unreadable training image(s) and %ld evaluation image(s) skipped and replaced "
                "(named on stderr; --strict-images makes them errors)\n",
                p.epoch, skipped_train, e.skipped);
  std::fflush(stdout);
  json::Value m = json::Value::object();
  m.set("type", "eval");
  m.set("epoch", p.epoch);
  m.set("step", p.step);
  m.set("loss", e.loss);  // null when NaN
  m.set("top1", e.top1);
  m.set("top5", e.top5);
  m.set("nonfinite_logits", e.nonfinite);
  m.set("skipped_train_images", skipped_train);
  m.set("skipped_eval_images", e.skipped);
  metrics.write(m);
}

}  // namespace

int run_train(const cli::Flags& f) {
  validate_flags(f);
  const int64_t epochs = f.integer("epochs"), accum = f.integer("accum-steps"), print_freq = f.integer("print-freq");
  Setup s = build(f, true);
  nn::Module& model = *s.model;
  const bool resuming = !f.str("resume").empty();
  const std::string out = f.str("output-dir").empty()
                              ? (resuming ? fs::path(f.str("resume")).parent_path().string() : default_output_dir(f))
                              : f.str("output-dir");
  prepare_output_dir(out, f.str("resume"));
  const fs::path dir = out.empty() ? fs::path(".") : fs::path(out);

  if (!f.str("init-weights").empty()) load_weights(f.str("init-weights"), model, !f.boolean("init-weights-non-strict"));
  model.to(s.device, s.format);
  model.train();
  auto opt = make_optimizer(f, model);
  MixedPrecision mp(model, mixed_precision_options(s.precision));

  data::SamplerOptions so;
  so.shuffle = !f.boolean("no-shuffle");
  so.seed = uint64_t(f.integer("seed"));
  so.drop_last = true;  // every step sees a full batch (batch-norm statistics, exact resume)
  data::Loader loader(*s.train_set, data::Sampler(s.train_set->size(), f.integer("batch-size"), so),
                      loader_options(f, s.device));
  data::DeviceFeeder feed(loader, s.device, s.format, mp.input_dtype());
  const int64_t batches_per_epoch = loader.num_batches();
  if (batches_per_epoch < accum)
    throw cli::UsageError("the training set (" + std::to_string(s.train_set->size()) +
                          " images) is smaller than one step of --accum-steps " + std::to_string(accum) +
                          " x --batch-size " + f.str("batch-size") + "; lower them");
  const int64_t steps_per_epoch = batches_per_epoch / accum;
  optim::LrScheduleOptions sched;
  sched.kind = optim::parse_lr_schedule(f.str("lr-scheduler"));
  sched.warmup_epochs = f.integer("lr-warmup-epochs");
  sched.warmup_decay = f.number("lr-warmup-decay");
  sched.step_size = f.integer("lr-step-size");
  sched.gamma = f.number("lr-gamma");
  if (sched.kind == optim::LrScheduleKind::multistep) sched.milestones = optim::parse_milestones(f.str("lr-milestones"));
  sched.lr_min = f.number("lr-min");
  sched.power = f.number("lr-power");
  const optim::LrSchedule schedule(f.number("lr"), steps_per_epoch, epochs, sched);

  Progress p;
  auto flags = f.effective();
  flags["precision"] = precision_name(s.precision);  // what auto chose: resuming must choose the same
  if (resuming) {
    std::map<std::string, std::string> saved;
    std::map<std::string, Tensor> scaler_state;
    p = load_checkpoint(f.str("resume"), model, *opt, &saved, &scaler_state);
    for (const auto& k : kTrajectoryFlags)
      if (saved.count(k) && saved.at(k) != flags.at(k))
        throw cli::UsageError("--resume: the checkpoint was trained with --" + k + " " + saved.at(k) +
                              " but this run has --" + k + " " + flags.at(k) +
                              "; resume with the same value (or start a new run)");
    mp.load_state(scaler_state);
    std::printf("resumed %s at epoch %ld, batch %ld, step %ld\n", f.str("resume").c_str(), p.epoch, p.batch, p.step);
  }
  MetricsLog metrics((dir / "metrics.jsonl").string());
  const int64_t max_steps = f.integer("steps") > 0 ? f.integer("steps") : epochs * steps_per_epoch;
  const fs::path ckpt = dir / "checkpoint.safetensors", weights = dir / "model.safetensors";
  InterruptHandler interrupt;  // Note [Interrupts]
  const bool skip_nonfinite = f.boolean("skip-nonfinite");
  const bool loss_on_device = s.device.is_cuda() && !skip_nonfinite;  // Note [Loss on the device]
  LossMeter losses(!loss_on_device);
  int64_t window_start = p.step;  // the log window's first step is window_start + 1
  // A NaN/Inf loss kept on the device is found here, at the latest (read each step, it
  // was found at its step).
  auto check_window_loss = [&]() {
    if (!loss_on_device) return;
    const double sum = losses.window_sum();
    if (std::isfinite(sum)) return;
    const auto bad = first_nonfinite(model.named_parameters());
    RT_FAIL("loss is ", sum, " in steps ", window_start + 1, "-", p.step, " (epoch ", p.epoch,
            "; on CUDA the loss is read at each --print-freq step and before a checkpoint): ",
            bad ? "'" + *bad + "' is now NaN or Inf: training diverged (or a batch held NaN/Inf). Lower --lr, add "
                      "--lr-warmup-epochs, or pass --skip-nonfinite, which checks every step and names the cause"
                : "the weights are finite: an input batch held NaN or Inf, or the loss overflowed; "
                  "--skip-nonfinite checks every step and names the cause");
  };
  auto save = [&]() {
    check_window_loss();
    set_save_in_progress(save_temp_path(ckpt.string()));
    save_checkpoint(ckpt.string(), model, *opt, p, flags, mp.state());
    set_save_in_progress("");
  };

  std::printf("training on %s: %ld images, %ld steps per epoch, %ld epochs, %s; output %s\n",
              s.device.str().c_str(), s.train_set->size(), steps_per_epoch, epochs, schedule.describe().c_str(),
              dir.string().c_str());
  const auto t_start = Clock::now();
  auto t_log = t_start;
  const int64_t start_step = p.step;
  // Note [Non-finite steps]: with --skip-nonfinite, the state after the last step that stood.
  std::optional<TrainState> good;
  if (skip_nonfinite) good = TrainState::take(model, *opt, mp);
  LogWindow w;
  int64_t skipped_total = 0;
  bool stop = p.step >= max_steps, interrupted = false;
  while (!stop && p.epoch < epochs) {
    feed.start_epoch(p.epoch, p.batch);
    while (!stop) {
      if (interrupt.signal()) {
        interrupted = stop = true;
        break;
      }
      // One optimizer step over `accum` micro-batches. `skip_why` says why it is skipped.
      opt->set_lr(schedule.lr_at(p.step));
      std::string skip_why;
      int got = 0;
      for (; got < accum; ++got) {
        const std::optional<data::DeviceBatch> b = feed.next();
        if (!b) break;
        Tensor loss = cross_entropy(mp.forward(b->input), b->labels, f.number("label-smoothing"));
        const std::optional<double> l = losses.add(loss, accum);  // nullopt: on the device
        if (l && skip_why.empty() && !std::isfinite(*l)) {
          const std::string cause = nonfinite_loss_cause(b->input, model, p.step > start_step, skip_nonfinite);
          RT_CHECK(skip_nonfinite, "loss is ", *l, " at step ", p.step + 1, " (epoch ", p.epoch, "): ", cause);
          skip_why = "loss " + std::to_string(*l) + ": " + cause;
        }
        if (skip_why.empty()) {
          if (accum > 1) loss = mul(loss, 1.0 / double(accum));
          mp.backward(loss);
        }
        p.samples_seen += b->input.size(0);
        w.samples += b->input.size(0);
      }
      if (got < accum) {  // end of epoch: a partial accumulation is dropped, like drop_last
        losses.end_step(false);
        opt->zero_grad();
        break;
      }
      p.batch += accum;
      // fp16's loss scaler checks the gradients itself (and skips on overflow).
      if (skip_why.empty() && skip_nonfinite && !mp.loss_scaling())
        if (const auto bad = first_nonfinite(gradients(*opt)))
          skip_why = "the gradient of '" + *bad + "' is NaN or Inf";
      if (skip_why.empty() && !mp.step(*opt)) ++w.overflow_skips;
      opt->zero_grad();
      if (skip_why.empty() && skip_nonfinite) {
        TrainState after = TrainState::take(model, *opt, mp);
        if (const auto bad = after.first_nonfinite()) skip_why = "the step made '" + *bad + "' NaN or Inf";
        else good = std::move(after);
      }
      ++p.step;
      ++w.steps;
      losses.end_step(skip_why.empty());
      if (!skip_why.empty()) {
        good->restore(model, *opt, mp);
        ++w.skipped;
        ++skipped_total;
        std::fprintf(stderr, "step %ld skipped (--skip-nonfinite; weights and optimizer state unchanged): %s\n",
                     p.step, skip_why.c_str());
      }
      stop = p.step >= max_steps;
      if (p.step % print_freq == 0 || stop) {
        check_window_loss();
        w.loss_sum = losses.window_sum();  // on CUDA the host waits here (Note [Loss on the device])
        const auto now = Clock::now();
        const double dt = std::chrono::duration<double>(now - t_log).count();
        const double elapsed = std::chrono::duration<double>(now - t_start).count();
        const double ips = double(w.samples) / std::max(dt, 1e-9);
        const double eta = elapsed / double(p.step - start_step) * double(max_steps - p.step);
        log_train(metrics, p, max_steps, opt->lr(), w, ips, eta, mp, skip_nonfinite);
        t_log = now;
        w = LogWindow{};
        losses.reset_window();
        window_start = p.step;
      }
      if (f.integer("checkpoint-every") > 0 && p.step % f.integer("checkpoint-every") == 0) save();
    }
    if (interrupted) break;
    if (p.batch + accum > batches_per_epoch) {  // the epoch is complete: evaluate, move on
      const int64_t skipped = loader.skipped_in_epoch();
      const EvalResult e = evaluate(model, mp, *s.test_set, f, s.device, s.format, &interrupt);
      if (e.interrupted) {  // the checkpoint keeps p.batch at the end: a resumed run evaluates
        interrupted = true;
        break;
      }
      log_eval(metrics, p, e, skipped);
      ++p.epoch;
      p.batch = 0;
    }
    save();
  }
  if (const int sig = interrupt.signal()) {  // also one that came after the last step
    save();
    std::fprintf(stderr, "ringtape train: interrupted by %s after step %ld: checkpoint saved to %s; continue with "
                 "--resume %s\n", signal_name(sig), p.step, ckpt.c_str(), ckpt.c_str());
    return 128 + sig;
  }
  save();
  set_save_in_progress(save_temp_path(weights.string()));
  save_weights(weights.string(), model);
  set_save_in_progress("");
  const double total = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::printf("done: %ld steps in %.1f s", p.step, total);
  if (skipped_total > 0) std::printf(" (%ld skipped on NaN/Inf by --skip-nonfinite)", skipped_total);
  std::printf("; weights in %s\n", weights.c_str());
  return 0;
}

int run_eval(const cli::Flags& f) {
  validate_flags(f);
  if (f.str("checkpoint").empty() && f.str("init-weights").empty())
    throw cli::UsageError("ringtape eval needs weights: --init-weights FILE.safetensors or --checkpoint FILE");
  Setup s = build(f, false);
  nn::Module& model = *s.model;
  if (!f.str("checkpoint").empty()) load_checkpoint_model(f.str("checkpoint"), model);
  else load_weights(f.str("init-weights"), model, !f.boolean("init-weights-non-strict"));
  model.to(s.device, s.format);
  MixedPrecision mp(model, mixed_precision_options(s.precision));
  const auto t0 = Clock::now();
  const EvalResult e = evaluate(model, mp, *s.test_set, f, s.device, s.format);
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("eval %s on %s: loss %s  top-1 %.2f%%  top-5 %.2f%%  (%ld images%s, %.1f img/s)\n",
              f.str("model").c_str(), f.str("dataset").c_str(), fmt_loss(e.loss).c_str(), e.top1, e.top5, e.n,
              nonfinite_note(e.nonfinite).c_str(), double(e.n) / dt);
  if (e.skipped > 0)
    std::printf("%ld unreadable image(s) skipped and replaced (named on stderr)\n", e.skipped);
  return 0;
}

}  // namespace rt::train
