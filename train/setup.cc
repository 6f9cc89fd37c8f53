#include "train/setup.h"

#include "base/usage_error.h"
#include "engine/memory_tag.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "data/datasets/dataset_registry.h"
#include "engine/nn/layers.h"
#include "models/registry.h"
#include "train/checkpoint.h"

namespace rt::train {
namespace {

// --device auto: the GPU when one is present (cuda:0), else the CPU.
Device pick_device(const std::optional<Device>& requested) {
  if (!requested) {
    const Device d = default_device();
    std::printf("device auto: %s\n", d.is_cuda() ? "cuda:0 (a CUDA device is present)" : "cpu (no CUDA device)");
    return d;
  }
  if (requested->is_cuda()) allocator_for(*requested);  // a clear error when the device does not exist
  return *requested;
}

// --precision on the chosen device, and the CUDA math switches that go with it.
Precision pick_precision(const ComputeConfig& c, Device device) {
  const Precision p = resolve_precision(c.precision, device);
  if (!c.precision)
    std::printf("precision auto: %s (%s)\n", precision_name(p), auto_precision_reason(device).c_str());
  if (device.is_cuda()) {
    set_cuda_math(p, c.cudnn_benchmark, c.cudnn_benchmark_runtime_compiled);
  } else {
    if (p == Precision::tf32) std::printf("precision tf32: the CPU has no TF32; it computes in fp32\n");
    if (c.cudnn_benchmark) std::printf("--cudnn-benchmark ignored on the CPU\n");
  }
  return p;
}

// The architecture for images of `image` (C, H, W) from a dataset of `classes` classes.
models::ModelOptions model_options(const CommonConfig& c, const Shape& image, int64_t classes, bool training) {
  // The architecture follows the training image size, also in `ringtape eval` (whose
  // ImageNet evaluation crop may sit on the other side of the threshold).
  const int64_t train_px =
      data::find_dataset(c.data.dataset).image_pipeline ? c.data.train_crop_size : std::max(image[1], image[2]);
  const bool small = train_px <= 64;
  models::ModelOptions mo;
  mo.num_classes = c.model.num_classes > 0 ? c.model.num_classes : classes;
  mo.in_channels = image[0];
  mo.width = c.model.width > 0 ? c.model.width : small ? 16 : 64;
  mo.small_stem = c.model.small_stem.value_or(small);
  if (mo.small_stem)
    mo.stem_stride = c.model.stem_stride > 0 ? c.model.stem_stride : train_px <= 28 ? 2 : 1;
  else if (c.model.stem_stride == 2)
    throw UsageError("--stem-stride 2 needs the small stem, which --small-stem auto leaves off for " +
                          std::to_string(train_px) + "-px images; add --small-stem true");
  if (training) {
    mo.zero_init_residual = c.model.zero_init_residual;
    mo.seed = c.seed;
  }
  return mo;
}

}  // namespace

data::DatasetOptions dataset_options(const CommonConfig& c) {
  data::DatasetOptions o;
  // Read by the generated datasets only (data::DatasetEntry::generated).
  const auto [n, ch, h, w] = c.data.synthetic_size;
  o.synthetic.size = n;
  o.synthetic.image_shape = {ch, h, w};
  o.synthetic.seed = c.seed;
  if (c.model.num_classes > 0) o.synthetic.num_classes = c.model.num_classes;
  // "tensors" files: with --num-classes every label must be below it, checked as the file
  // opens (naming it); 0 = derived from the labels (Note [Label range], data/datasets/dataset.h).
  o.num_classes = c.model.num_classes;
  // Small in-memory datasets: the dataset's padding (2 for 28-px images, 4 for 32-px ones).
  o.augment.enabled = c.data.augment;
  o.augment.pad = data::find_dataset(c.data.dataset).augment_pad;
  o.augment.seed = c.seed;
  o.image_folder.train_crop_size = int(c.data.train_crop_size);
  o.image_folder.val_resize_size = int(c.data.val_resize_size);
  o.image_folder.val_crop_size = int(c.data.val_crop_size);
  o.image_folder.seed = c.seed;
  o.image_folder.cache_dir = c.data.cache_dir;
  o.image_folder.max_image_pixels = c.data.max_image_pixels;
  o.image_folder.interpolation = c.data.interpolation;
  o.image_folder.auto_augment = c.data.auto_augment;
  o.webdataset.val_path = c.data.val_data_path;
  return o;
}

Setup set_up(const CommonConfig& cfg, bool training) {
  if (cfg.compute.threads > 0) omp_set_num_threads(cfg.compute.threads);
  Setup s;
  s.device = pick_device(cfg.compute.device);
  s.precision = pick_precision(cfg.compute, s.device);
  const data::DatasetOptions dopt = dataset_options(cfg);
  const std::string& dataset = cfg.data.dataset;
  if (training) s.train_set = data::open_dataset(dataset, cfg.data.data_path, "train", dopt);
  s.test_set = data::open_dataset(dataset, cfg.data.data_path, "test", dopt);
  const data::Dataset& ref = training ? *s.train_set : *s.test_set;
  const models::ModelOptions mo = model_options(cfg, ref.image_shape(), ref.num_classes(), training);
  // A label the model has no output for is an error now, not mid-epoch (or never).
  if (s.train_set) data::check_labels(*s.train_set, mo.num_classes);
  data::check_labels(*s.test_set, mo.num_classes);
  s.format = cfg.model.memory_format;
  {
    const MemoryTagScope tag(MemoryTag::parameters);  // the allocator's attribution (engine/memory_tag.h)
    s.model = models::make_model(cfg.model.name, mo);
  }
  s.model_options = mo;
  std::printf("model %s: width %ld, %s stem, %ld classes, %ld input channels, %.2fM parameters, %s, %s\n",
              cfg.model.name.c_str(), mo.width,
              !mo.small_stem ? "imagenet" : mo.stem_stride == 1 ? "small stride-1" : "small stride-2",
              mo.num_classes, mo.in_channels, double(s.model->num_parameters()) / 1e6, format_name(s.format),
              precision_name(s.precision));
  return s;
}

std::shared_ptr<nn::Module> make_model_like(const CommonConfig& cfg, const Setup& s) {
  const MemoryTagScope tag(MemoryTag::parameters);
  std::shared_ptr<nn::Module> m = models::make_model(cfg.model.name, s.model_options);
  m->to(s.device, s.format);
  return m;
}

std::map<std::string, std::string> architecture_record(const std::string& model, const models::ModelOptions& mo) {
  return {{"arch.model", model},
          {"arch.width", std::to_string(mo.width)},
          {"arch.small-stem", mo.small_stem ? "true" : "false"},
          {"arch.stem-stride", mo.small_stem ? std::to_string(mo.stem_stride) : "none"},
          {"arch.classes", std::to_string(mo.num_classes)},
          {"arch.in-channels", std::to_string(mo.in_channels)}};
}

std::string architecture_difference(const std::map<std::string, std::string>& then,
                                    const std::map<std::string, std::string>& now) {
  static const std::pair<const char*, const char*> kWhat[] = {
      {"arch.model", "model"},           {"arch.small-stem", "the small stem"}, {"arch.width", "width"},
      {"arch.stem-stride", "the small stem's stride"}, {"arch.classes", "classes"},
      {"arch.in-channels", "input channels"}};
  const auto shown = [](const std::string& k, const std::string& v) {
    return k == "arch.small-stem" ? std::string(v == "true" ? "on" : "off") : v;
  };
  std::string out;
  for (const auto& [key, what] : kWhat) {
    if (!then.count(key) || !now.count(key) || then.at(key) == now.at(key)) continue;
    if (std::string(key) == "arch.stem-stride" && then.at("arch.small-stem") != now.at("arch.small-stem")) continue;
    out += std::string(out.empty() ? "" : "; ") + what + ": " + shown(key, then.at(key)) + " in the checkpoint, " +
           shown(key, now.at(key)) + " here";
  }
  return out;
}

void check_checkpoint_fits(const std::string& path, const CommonConfig& cfg, const Setup& s) {
  const std::map<std::string, std::string> then = read_checkpoint_flags(path);
  const std::map<std::string, std::string> now = architecture_record(cfg.model.name, s.model_options);
  const std::string diff = architecture_difference(then, now);
  if (diff.empty()) return;
  const auto differs = [&](const std::string& k) { return then.count(k) && then.at(k) != now.at(k); };
  const std::string crop = then.count("train-crop-size") ? then.at("train-crop-size") : "";
  std::string fix;
  // The stem and --width auto follow --train-crop-size (model_options above), here too.
  if (data::find_dataset(cfg.data.dataset).image_pipeline && !crop.empty() &&
      crop != std::to_string(cfg.data.train_crop_size) &&
      (differs("arch.small-stem") || differs("arch.width") || differs("arch.stem-stride")))
    fix = "the checkpoint was trained with --train-crop-size " + crop + ", and the model's stem (small for 64 px "
          "or less: --small-stem auto) and --width auto follow it, also when evaluating; pass --train-crop-size " +
          crop + " as the training did";
  else {
    fix = "pass the training's settings:";
    if (differs("arch.model")) fix += " --model " + then.at("arch.model");
    if (differs("arch.width")) fix += " --width " + then.at("arch.width");
    if (differs("arch.small-stem")) fix += " --small-stem " + then.at("arch.small-stem");
    if (differs("arch.stem-stride") && then.at("arch.stem-stride") != "none")
      fix += " --stem-stride " + then.at("arch.stem-stride");
    if (differs("arch.classes")) fix += " --num-classes " + then.at("arch.classes");
    if (differs("arch.in-channels"))
      fix += " (and the training's --dataset: its images have " + then.at("arch.in-channels") + " channels)";
  }
  throw UsageError("checkpoint '" + path + "' holds another model than this run builds: " + diff + "; " + fix);
}

void load_init_weights(const CommonConfig& cfg, nn::Module& model) {
  if (!cfg.init_weights.empty()) load_weights(cfg.init_weights, model, cfg.init_weights_strict);
}

data::LoaderOptions loader_options(const LoaderConfig& cfg, Device device) {
  data::LoaderOptions lo;
  lo.workers = cfg.workers;
  lo.strict = cfg.strict_images;
  lo.pin_memory = device.is_cuda();
  return lo;
}

// torchvision's set_weight_decay(model, weight_decay, norm_weight_decay, custom_keys=[("bias",
// bias_weight_decay)]): a parameter named "bias" takes bias_weight_decay (also a batch norm's
// bias), another parameter of a batch norm norm_weight_decay, each when given.
optim::DecayByName decay_groups(const OptimizerConfig& cfg, nn::Module& model) {
  std::set<std::string> norms;  // the batch norms' module paths
  for (const auto& [path, m] : model.named_modules())
    if (dynamic_cast<const nn::BatchNorm2d*>(m)) norms.insert(path);
  optim::DecayByName out;
  for (const auto& [name, p] : model.named_parameters()) {
    const size_t dot = name.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : name.substr(0, dot);
    if (name.substr(dot + 1) == "bias" && cfg.bias_weight_decay) out[name] = *cfg.bias_weight_decay;
    else if (norms.count(owner) && cfg.norm_weight_decay) out[name] = *cfg.norm_weight_decay;
  }
  return out;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerConfig& cfg, nn::Module& model) {
  const optim::DecayByName decay_of = decay_groups(cfg, model);
  if (cfg.kind == OptimizerKind::lars) {
    optim::LarsOptions o;
    o.lr = cfg.lr;
    o.momentum = cfg.momentum;
    o.nesterov = cfg.nesterov;
    o.weight_decay = cfg.weight_decay;
    o.eta = cfg.lars_eta;
    o.exclude_bn_bias = cfg.lars_exclude_bn_bias;
    o.weight_decay_of = decay_of;
    return optim::make_lars(model.named_parameters(), o);
  }
  if (cfg.kind == OptimizerKind::adamw) {
    optim::AdamWOptions o;
    o.lr = cfg.lr;
    o.weight_decay = cfg.weight_decay;
    o.no_decay_1d = cfg.no_bn_bias_decay;
    o.weight_decay_of = decay_of;
    return optim::make_adamw(model.named_parameters(), o);
  }
  optim::SgdOptions o;
  o.lr = cfg.lr;
  o.momentum = cfg.momentum;
  o.nesterov = cfg.nesterov;
  o.weight_decay = cfg.weight_decay;
  o.no_decay_1d = cfg.no_bn_bias_decay;
  o.weight_decay_of = decay_of;
  return optim::make_sgd(model.named_parameters(), o);
}

TrainData open_train_data(const TrainConfig& cfg, const Setup& s, DType input_dtype, const ParallelContext& par) {
  data::SamplerOptions so;
  so.shuffle = cfg.loop.shuffle;
  so.seed = cfg.seed;
  so.drop_last = true;  // every step sees a full batch (batch-norm statistics, exact resume)
  so.rank = par.rank();
  so.world_size = par.world_size();
  so.repetitions = cfg.data.ra_repetitions;
  so.shard_sizes = s.train_set->shard_sizes();  // shards are read in Note [Shard order]'s order
  so.shuffle_buffer = cfg.data.shuffle_buffer;
  TrainData d;
  d.loader = std::make_unique<data::Loader>(
      *s.train_set, data::Sampler(s.train_set->size(), cfg.loader.batch_size, so), loader_options(cfg.loader, s.device));
  d.feed = std::make_unique<data::DeviceFeeder>(*d.loader, s.device, s.format, input_dtype);
  d.batches_per_epoch = d.loader->num_batches();
  const int64_t accum = cfg.loop.accum_steps;
  if (d.batches_per_epoch < accum)
    throw UsageError("the training set (" + std::to_string(s.train_set->size()) +
                     " images) is smaller than one step of --accum-steps " + std::to_string(accum) +
                     " x --batch-size " + std::to_string(cfg.loader.batch_size) + "; lower them");
  d.steps_per_epoch = d.batches_per_epoch / accum;
  return d;
}

}  // namespace rt::train
