#include "train/train_config.h"

#include <utility>

#include "engine/error.h"
#include "train/train_flags.h"

namespace rt::train {
namespace {

// A choice flag's value as its enum. The flag table's choices (train_flags.cc) hold only
// names listed here (train_config_test parses each), and cli::Flags refused any other.
template <class E, size_t N>
E choice(const cli::Flags& f, const std::string& flag, const std::pair<const char*, E> (&names)[N]) {
  const std::string v = f.str(flag);
  for (const auto& [name, value] : names)
    if (v == name) return value;
  RT_FAIL("--", flag, " ", v, ": the flag table (train/train_flags.cc) offers a choice that train/train_config.cc ",
          "does not map; add it to the choice's table there");
}

constexpr std::pair<const char*, DatasetKind> kDatasets[] = {
    {"fashion-mnist", DatasetKind::fashion_mnist}, {"cifar10", DatasetKind::cifar10},
    {"imagenet", DatasetKind::imagenet},           {"synthetic", DatasetKind::synthetic},
    {"tensors", DatasetKind::tensors}};
constexpr std::pair<const char*, DType> kReduceDtypes[] = {{"fp32", DType::f32}, {"bf16", DType::bf16}};
constexpr std::pair<const char*, OptimizerKind> kOptimizers[] = {{"sgd", OptimizerKind::sgd},
                                                                 {"adamw", OptimizerKind::adamw}};
constexpr std::pair<const char*, MemoryFormat> kMemoryFormats[] = {{"auto", MemoryFormat::channels_last},
                                                                   {"channels_last", MemoryFormat::channels_last},
                                                                   {"contiguous", MemoryFormat::contiguous}};
constexpr std::pair<const char*, std::optional<bool>> kSmallStem[] = {
    {"auto", std::nullopt}, {"true", true}, {"false", false}};
constexpr std::pair<const char*, int> kStemStride[] = {{"auto", 0}, {"1", 1}, {"2", 2}};

// The flags of model_and_data_flags() and --label-smoothing, which both commands take.
// validate_flags has checked every value read here.
void read_common(const cli::Flags& f, CommonConfig& c) {
  c.model.name = f.str("model");
  c.model.width = f.str("width") == "auto" ? 0 : std::stol(f.str("width"));
  c.model.small_stem = choice(f, "small-stem", kSmallStem);
  c.model.stem_stride = choice(f, "stem-stride", kStemStride);
  c.model.num_classes = f.integer("num-classes");
  c.model.memory_format = choice(f, "memory-format", kMemoryFormats);

  c.data.dataset = choice(f, "dataset", kDatasets);
  c.data.data_path = f.str("data-path");
  // Checked when it matters (--dataset synthetic, or given); the default always parses.
  if (const auto size = parse_synthetic_size(f.str("synthetic-size"))) c.data.synthetic_size = *size;
  c.data.train_crop_size = f.integer("train-crop-size");
  c.data.val_resize_size = f.integer("val-resize-size");
  c.data.val_crop_size = f.integer("val-crop-size");
  c.data.cache_dir = f.str("cache-dir");

  c.loader.batch_size = f.integer("batch-size");
  c.loader.workers = int(f.integer("workers"));
  c.loader.strict_images = f.boolean("strict-images");

  const std::string device = f.str("device");
  c.compute.device = device == "auto" ? std::nullopt : std::optional<Device>(Device::parse(device));
  c.compute.precision = parse_precision(f.str("precision"));
  c.compute.threads = int(f.integer("threads"));

  c.init_weights = f.str("init-weights");
  c.init_weights_strict = !f.boolean("init-weights-non-strict");
  c.label_smoothing = f.number("label-smoothing");
  c.seed = uint64_t(f.integer("seed"));
  try {
    c.profile = prof::parse_profile_steps(f.str("profile-steps"), f.str("profile-group"));
  } catch (const Error& e) {
    throw cli::UsageError(e.what());
  }
  c.profile_dir = f.str("profile-dir");
}

optim::LrScheduleOptions read_lr_schedule(const cli::Flags& f) {
  optim::LrScheduleOptions s;
  s.kind = optim::parse_lr_schedule(f.str("lr-scheduler"));
  s.warmup_epochs = f.integer("lr-warmup-epochs");
  s.warmup_decay = f.number("lr-warmup-decay");
  s.step_size = f.integer("lr-step-size");
  s.gamma = f.number("lr-gamma");
  // Another schedule's flags are not looked at (torchvision ignores them too).
  if (s.kind == optim::LrScheduleKind::multistep) s.milestones = optim::parse_milestones(f.str("lr-milestones"));
  s.lr_min = f.number("lr-min");
  s.power = f.number("lr-power");
  return s;
}

}  // namespace

const char* dataset_name(DatasetKind d) {
  for (const auto& [name, value] : kDatasets)
    if (value == d) return name;
  return "?";
}

TrainConfig parse_train_config(const cli::Flags& f) {
  validate_flags(f);
  TrainConfig c;
  read_common(f, c);
  c.model.zero_init_residual = f.boolean("zero-init-residual");
  c.data.augment = f.boolean("augment");
  c.compute.cudnn_benchmark = f.boolean("cudnn-benchmark");
  c.compute.cudnn_benchmark_runtime_compiled = f.boolean("cudnn-benchmark-runtime-compiled");

  c.optimizer.kind = choice(f, "optimizer", kOptimizers);
  c.optimizer.lr = f.number("lr");
  c.optimizer.momentum = f.number("momentum");
  c.optimizer.nesterov = f.boolean("nesterov");
  c.optimizer.weight_decay = f.number("weight-decay");
  c.optimizer.no_bn_bias_decay = f.boolean("no-bn-bias-decay");
  c.lr_schedule = read_lr_schedule(f);

  c.loop.epochs = f.integer("epochs");
  c.loop.max_steps = f.integer("steps");
  c.loop.accum_steps = f.integer("accum-steps");
  c.loop.shuffle = !f.boolean("no-shuffle");
  c.loop.skip_nonfinite = f.boolean("skip-nonfinite");

  c.output.output_dir = f.str("output-dir");
  c.output.resume = f.str("resume");
  c.output.checkpoint_every = f.integer("checkpoint-every");
  c.output.print_freq = f.integer("print-freq");
  c.output.progress_bar = !f.boolean("no-progress");
  c.output.tensorboard = f.boolean("tensorboard");
  c.output.tensorboard_dir = f.str("tensorboard-dir");

  c.parallel.nproc_per_node = int(f.integer("nproc-per-node"));
  c.parallel.nnodes = int(f.integer("nnodes"));
  c.parallel.node_rank = int(f.integer("node-rank"));
  c.parallel.master_addr = f.str("master-addr");
  c.parallel.master_port = int(f.integer("master-port"));
  c.parallel.allreduce = dist::parse_allreduce_algo(f.str("allreduce"));
  c.parallel.bucket_cap_mb = f.number("bucket-cap-mb");
  c.parallel.find_unused_parameters = f.boolean("find-unused-parameters");
  c.parallel.timeout_s = f.number("timeout");
  c.parallel.comm_timeline = f.boolean("comm-timeline");
  c.parallel.sync_bn = f.boolean("sync-bn");
  c.parallel.grad_reduce_dtype = choice(f, "grad-reduce-dtype", kReduceDtypes);
  c.recorded_flags = f.effective();
  return c;
}

EvalConfig parse_eval_config(const cli::Flags& f) {
  validate_flags(f);
  if (f.str("checkpoint").empty() && f.str("init-weights").empty())
    throw cli::UsageError("ringtape eval needs weights: --init-weights FILE.safetensors or --checkpoint FILE");
  EvalConfig c;
  read_common(f, c);
  c.checkpoint = f.str("checkpoint");
  return c;
}

}  // namespace rt::train
