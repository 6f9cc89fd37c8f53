#include "cli/train_flags.h"

#include "cli/recipes.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <utility>

#include "base/error.h"
#include "data/datasets/dataset_registry.h"
#include "distributed/communicator_ops.h"
#include "models/registry.h"
#include "optim/schedule.h"
#include "profile/report.h"
#include "train/straggler.h"

namespace rt::cli {

using namespace train;  // the configuration the rows set

namespace {

// Upper bounds of values that are otherwise only "positive". A bound says what no run
// needs, so a typo fails at once instead of as a crash or an allocation of terabytes later.
// --threads is not bounded by this machine's core count: --threads is a trajectory flag
// (Note [Exact resume]), and resuming a run on a smaller machine needs the same count.
constexpr int64_t kMaxThreads = 1024;       // --threads 100000 crashed the OpenMP runtime
constexpr int64_t kMaxWorkers = 1024;       // loader threads
constexpr int64_t kMaxClasses = 1000000;    // ImageNet-21k has 21841; the classifier is width x classes
constexpr int64_t kMaxWidth = 65536;        // torchvision's ResNets have 64
constexpr double kNoLimit = double(std::numeric_limits<int64_t>::max());
constexpr double kInf = std::numeric_limits<double>::infinity();

// The training's course: --resume refuses another value, every rank must have rank 0's.
constexpr unsigned kCourse = kTrajectory | kSameOnEveryRank;

Range at_least(double lo, std::string rule) { return Range{lo, kInf, false, std::move(rule)}; }
Range within(double lo, double hi, std::string rule) { return Range{lo, hi, false, std::move(rule)}; }
// A number written as it would be typed: the shortest text that reads back as `v` (25, 0.5,
// 5e-4: to_chars' exponent without its sign and leading zeros).
std::string as_typed(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  RT_CHECK(ec == std::errc(), "as_typed: ", v, " does not fit");
  std::string s(buf, end);
  if (const size_t e = s.find('e'); e != std::string::npos) {
    size_t i = e + 1;
    if (s[i] == '+') s.erase(i, 1);
    else if (s[i] == '-') ++i;
    while (i + 1 < s.size() && s[i] == '0') s.erase(i, 1);
  }
  return s;
}

// Note [Defaults from the config]
// A row's default is the value of its field in a default-constructed configuration, written
// as the flag would be typed (the functions below), and never a literal of its own: the
// struct (train/train_config.h) is the one source, and what the help prints, what
// Flags::str returns for a flag not given and what the checkpoint records follow from it.
// train_config_test runs every row's setter on its printed default and requires the
// default-constructed configuration back, so a row and its field cannot drift apart. The
// rows without a field (--recipe, --ra-reps) say so beside them.
std::string typed(const std::string& v) { return v; }
std::string typed(bool v) { return v ? "true" : "false"; }
std::string typed(int v) { return std::to_string(v); }
std::string typed(int64_t v) { return std::to_string(v); }
std::string typed(uint64_t v) { return std::to_string(v); }
std::string typed(double v) { return as_typed(v); }
// 0 = auto (--width).
std::string auto_or(int64_t v) { return v == 0 ? "auto" : typed(v); }
// nullopt = none (--norm-weight-decay, --bias-weight-decay).
std::string decay_text(const std::optional<double>& v) { return v ? typed(*v) : "none"; }
std::string size_text(const std::array<int64_t, 4>& v) {
  return typed(v[0]) + "x" + typed(v[1]) + "x" + typed(v[2]) + "x" + typed(v[3]);
}
std::string milestones_text(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t m : v) s += (s.empty() ? "" : ",") + typed(m);
  return s;
}
// prof::parse_profile_steps' input for `p`: "A:B" (1-based), "" when off.
std::string profile_steps_text(const prof::ProfileConfig& p) {
  return p.enabled() ? typed(p.first + 1) + ":" + typed(p.end + 1) : "";
}
std::string bounds(int64_t lo, int64_t hi) { return "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"; }

Flag flag(std::string name, FlagType type, std::string default_value, Topic topic, std::string help,
          std::vector<std::string> choices = {}, std::optional<Range> range = std::nullopt, unsigned roles = 0) {
  return Flag{std::move(name), type, std::move(default_value), std::move(help), std::move(choices), topic,
              std::move(range), roles};
}

FlagRow both(Flag f, std::function<void(const FlagValue&, CommonConfig&)> set) {
  return FlagRow{std::move(f), std::move(set), nullptr, nullptr, false, false};
}
FlagRow train_only(Flag f, std::function<void(const FlagValue&, TrainConfig&)> set) {
  return FlagRow{std::move(f), nullptr, std::move(set), nullptr, true, false};
}
FlagRow eval_only(Flag f, std::function<void(const FlagValue&, EvalConfig&)> set) {
  return FlagRow{std::move(f), nullptr, nullptr, std::move(set), false, true};
}

// A choice flag's value as its enum: the row's choices are the names listed here (each is
// parsed in train_config_test), and Flags refused any other.
template <class E, size_t N>
E choice(const FlagValue& v, const std::pair<const char*, E> (&names)[N]) {
  const std::string s = v.str();
  for (const auto& [name, value] : names)
    if (s == name) return value;
  RT_FAIL("--", v.name, " ", s, ": the flag's row (train/train_flags.cc) offers a choice its setter does not map");
}
// The name of `value` in a choice flag's table (the first, where several map to it: "auto").
template <class E, size_t N>
std::string name_in(const std::pair<const char*, E> (&names)[N], const E& value) {
  for (const auto& [name, v] : names)
    if (v == value) return name;
  RT_FAIL("a default has no name in its flag's choices (cli/train_flags.cc)");
}
template <class E, size_t N>
std::vector<std::string> names_of(const std::pair<const char*, E> (&names)[N]) {
  std::vector<std::string> v;
  for (const auto& n : names) v.push_back(n.first);
  return v;
}

constexpr std::pair<const char*, DType> kReduceDtypes[] = {{"fp32", DType::f32}, {"bf16", DType::bf16}};
constexpr std::pair<const char*, OptimizerKind> kOptimizers[] = {
    {"sgd", OptimizerKind::sgd}, {"adamw", OptimizerKind::adamw}, {"lars", OptimizerKind::lars}};
constexpr std::pair<const char*, MemoryFormat> kMemoryFormats[] = {{"auto", MemoryFormat::channels_last},
                                                                   {"contiguous", MemoryFormat::contiguous},
                                                                   {"channels_last", MemoryFormat::channels_last}};
constexpr std::pair<const char*, std::optional<bool>> kSmallStem[] = {
    {"auto", std::nullopt}, {"true", true}, {"false", false}};
constexpr std::pair<const char*, int> kStemStride[] = {{"auto", 0}, {"1", 1}, {"2", 2}};
constexpr std::pair<const char*, optim::WarmupMethod> kWarmupMethods[] = {
    {"linear", optim::WarmupMethod::linear},
    {"constant", optim::WarmupMethod::constant},
    {"mlperf", optim::WarmupMethod::mlperf}};
constexpr std::pair<const char*, data::AutoAugmentPolicy> kAutoAugment[] = {
    {"none", data::AutoAugmentPolicy::none},       {"imagenet", data::AutoAugmentPolicy::imagenet},
    {"ra", data::AutoAugmentPolicy::ra},           {"ta_wide", data::AutoAugmentPolicy::ta_wide},
    {"augmix", data::AutoAugmentPolicy::augmix}};
constexpr std::pair<const char*, data::Interpolation> kInterpolations[] = {
    {"bilinear", data::Interpolation::bilinear}, {"nearest", data::Interpolation::nearest}};

// --norm-weight-decay and --bias-weight-decay: "none" (the flag's default: --weight-decay
// applies) or a decay >= 0 (check_combinations refused anything else).
std::optional<double> decay_or_none(const FlagValue& v) {
  if (v.str() == "none") return std::nullopt;
  return std::stod(v.str());
}

// --data-path's forms, from the registry: "fashion-mnist: /usr/share/...; imagenet: DIR with ...".
std::string data_path_forms() {
  std::string s;
  for (const data::DatasetEntry& e : data::dataset_registry()) {
    const std::string& form = e.path_help.empty() ? e.default_path : e.path_help;
    if (!form.empty()) s += (s.empty() ? "" : "; ") + e.name + ": " + form;
  }
  return s;
}

std::vector<FlagRow> model_rows() {
  const TrainConfig d;  // the defaults (Note [Defaults from the config])
  return {
      // No field: the recipe is expanded into other flags before parsing, so "none" is the row's own.
      both(flag("recipe", FlagType::string, "none", Topic::model,
                "a named recipe: its flags first, then the command line's, which override them (the README's "
                "Recipes section gives each one's source and accuracy)",
                recipe_names()),
           nullptr),  // expanded before parsing (cli/recipes.h)
      both(flag("model", FlagType::string, typed(d.model.name), Topic::model, "model name", models::model_names(), {},
                kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.model.name = v.str(); }),
      both(flag("width", FlagType::string, auto_or(d.model.width), Topic::model,
                "channels of the first stage (torchvision: 64); auto = 64 for images over 64 px, else 16", {}, {},
                kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.model.width = v.str() == "auto" ? 0 : std::stol(v.str()); }),
      both(flag("small-stem", FlagType::string, name_in(kSmallStem, d.model.small_stem), Topic::model,
                "3x3 stride-1 stem without max-pool; auto = on for images of 64 px or less", names_of(kSmallStem), {},
                kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.model.small_stem = choice(v, kSmallStem); }),
      both(flag("stem-stride", FlagType::string, name_in(kStemStride, d.model.stem_stride), Topic::model,
                "small stem's stride; auto = 2 for images of 28 px or less (halves every stage), else 1",
                names_of(kStemStride), {}, kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.model.stem_stride = choice(v, kStemStride); }),
      both(flag("num-classes", FlagType::integer, typed(d.model.num_classes), Topic::model,
                "classifier outputs; 0 = the dataset's class count", {},
                within(0, kMaxClasses, bounds(0, kMaxClasses) + " (0 = the dataset's class count)"), kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.model.num_classes = v.integer(); }),
      train_only(flag("zero-init-residual", FlagType::boolean, typed(d.model.zero_init_residual), Topic::model,
                      "zero the last batch-norm weight of every block", {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.model.zero_init_residual = v.boolean(); }),
      both(flag("init-weights", FlagType::string, typed(d.init_weights), Topic::model,
                "weights to start from: a .safetensors state dict with torchvision's keys, or a ringtape checkpoint "
                "(its model part); every key must match the model (PyTorch's strict loading)"),
           [](const FlagValue& v, CommonConfig& c) { c.init_weights = v.str(); }),
      both(flag("init-weights-non-strict", FlagType::boolean, typed(!d.init_weights_strict), Topic::model,
                "load only the --init-weights entries that match the model in name and shape and list the rest "
                "(fine-tuning with a new head)"),
           [](const FlagValue& v, CommonConfig& c) { c.init_weights_strict = !v.boolean(); }),
      eval_only(flag("checkpoint", FlagType::string, typed(EvalConfig{}.checkpoint), Topic::model,
                     "a training checkpoint to evaluate (instead of --init-weights)"),
                [](const FlagValue& v, EvalConfig& c) { c.checkpoint = v.str(); }),
  };
}

std::vector<FlagRow> data_rows() {
  const TrainConfig d;  // the defaults (Note [Defaults from the config])
  return {
      both(flag("dataset", FlagType::string, typed(d.data.dataset), Topic::data, "dataset", data::dataset_names(), {},
                kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.data.dataset = v.str(); }),
      both(flag("data-path", FlagType::string, typed(d.data.data_path), Topic::data,
                "dataset location (" + data_path_forms() + ")"),
           [](const FlagValue& v, CommonConfig& c) { c.data.data_path = v.str(); }),
      both(flag("val-data-path", FlagType::string, typed(d.data.val_data_path), Topic::data,
                "webdataset: the evaluation shards (a folder's val-*.tar, a .tar or a brace pattern); default: the "
                "val-*.tar beside the training shards"),
           [](const FlagValue& v, CommonConfig& c) { c.data.val_data_path = v.str(); }),
      train_only(flag("shuffle-buffer", FlagType::integer, typed(d.data.shuffle_buffer), Topic::data,
                      "webdataset: examples in the shuffle buffer after the shards' shuffled order (0 = none)", {},
                      within(0, int64_t(1) << 30, "in [0, 2^30] (examples)"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.data.shuffle_buffer = v.integer(); }),
      both(flag("synthetic-size", FlagType::string, size_text(d.data.synthetic_size), Topic::data,
                "synthetic dataset: NxCxHxW (with --dataset synthetic)", {}, {}, kCourse),
           [](const FlagValue& v, CommonConfig& c) {
             // Checked where it matters (--dataset synthetic, or given); the default parses.
             if (const auto size = parse_synthetic_size(v.str())) c.data.synthetic_size = *size;
           }),
      both(flag("train-crop-size", FlagType::integer, typed(d.data.train_crop_size), Topic::data,
                "imagenet: RandomResizedCrop output size for training", {}, at_least(1, "a positive number of pixels"),
                kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.data.train_crop_size = v.integer(); }),
      both(
          flag("val-resize-size", FlagType::integer, typed(d.data.val_resize_size), Topic::data,
               "imagenet: evaluation resizes the shorter side to this", {}, at_least(1, "a positive number of pixels")),
          [](const FlagValue& v, CommonConfig& c) { c.data.val_resize_size = v.integer(); }),
      both(flag("val-crop-size", FlagType::integer, typed(d.data.val_crop_size), Topic::data,
                "imagenet: evaluation centre-crops this square", {}, at_least(1, "a positive number of pixels")),
           [](const FlagValue& v, CommonConfig& c) { c.data.val_crop_size = v.integer(); }),
      both(flag("strict-images", FlagType::boolean, typed(d.loader.strict_images), Topic::data,
                "stop at the first unreadable image (default: skip it, name it and count it)"),
           [](const FlagValue& v, CommonConfig& c) { c.loader.strict_images = v.boolean(); }),
      both(flag("max-image-pixels", FlagType::integer, typed(d.data.max_image_pixels), Topic::data,
                "refuse images whose header claims more pixels than this (PIL's MAX_IMAGE_PIXELS default); "
                "0 = no limit",
                {}, at_least(0, "an integer >= 0 (pixels; 0 = no limit)")),
           [](const FlagValue& v, CommonConfig& c) { c.data.max_image_pixels = v.integer(); }),
      both(flag("cache-dir", FlagType::string, typed(d.data.cache_dir), Topic::data,
                "where the imagenet file lists are cached (default $RINGTAPE_CACHE_DIR, $XDG_CACHE_HOME/ringtape or "
                "~/.cache/ringtape)"),
           [](const FlagValue& v, CommonConfig& c) { c.data.cache_dir = v.str(); }),
      both(flag("batch-size", FlagType::integer, typed(d.loader.batch_size), Topic::data,
                "images per step (per process)", {}, at_least(1, "a positive integer (images per step)"), kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.loader.batch_size = v.integer(); }),
      both(flag("workers", FlagType::integer, typed(d.loader.workers), Topic::data,
                "data loading threads (0 = load in the training thread)", {},
                within(0, kMaxWorkers, bounds(0, kMaxWorkers) + " (0 = load in the training thread)")),
           [](const FlagValue& v, CommonConfig& c) { c.loader.workers = int(v.integer()); }),
      train_only(flag("no-shuffle", FlagType::boolean, typed(!d.loop.shuffle), Topic::data,
                      "read the training set in file order", {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.loop.shuffle = !v.boolean(); }),
      train_only(flag("augment", FlagType::boolean, typed(d.data.augment), Topic::data,
                      "random crop (padding 2 / 4) and horizontal flip of small images (Fashion-MNIST, CIFAR-10, "
                      "synthetic); --augment false turns it off",
                      {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.data.augment = v.boolean(); }),
      both(flag("interpolation", FlagType::string, name_in(kInterpolations, d.data.interpolation), Topic::data,
                "imagenet: interpolation of the crop and resize (training and evaluation) and of --auto-augment",
                names_of(kInterpolations), {}, kCourse),
           [](const FlagValue& v, CommonConfig& c) {
             c.data.interpolation = c.data.auto_augment.interpolation = choice(v, kInterpolations);
           }),
      train_only(flag("auto-augment", FlagType::string, name_in(kAutoAugment, d.data.auto_augment.policy), Topic::data,
                      "imagenet: an automatic augmentation policy after the crop and flip: AutoAugment's ImageNet "
                      "policy, RandAugment, TrivialAugmentWide or AugMix (torchvision's)",
                      names_of(kAutoAugment), {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.data.auto_augment.policy = choice(v, kAutoAugment); }),
      train_only(flag("ra-magnitude", FlagType::integer, typed(d.data.auto_augment.ra_magnitude), Topic::data,
                      "--auto-augment ra: the magnitude bin of every operation", {},
                      within(0, 30, "in [0, 30] (RandAugment's 31 bins)"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.data.auto_augment.ra_magnitude = int(v.integer()); }),
      train_only(
          flag("augmix-severity", FlagType::integer, typed(d.data.auto_augment.augmix_severity), Topic::data,
               "--auto-augment augmix: the severity of the operations", {}, within(1, 10, "in [1, 10]"), kCourse),
          [](const FlagValue& v, TrainConfig& c) { c.data.auto_augment.augmix_severity = int(v.integer()); }),
      train_only(flag("random-erase", FlagType::number, typed(d.data.random_erase), Topic::data,
                      "probability of erasing a random rectangle of each training image (RandomErasing, after "
                      "normalisation, on the training device)",
                      {}, within(0, 1, "in [0, 1] (0 = off)"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.data.random_erase = v.number(); }),
      train_only(flag("mixup-alpha", FlagType::number, typed(d.data.mixup_alpha), Topic::data,
                      "mixup of each batch with itself rolled by one, lambda ~ Beta(alpha, alpha) (with "
                      "--cutmix-alpha: one of the two per batch)",
                      {}, at_least(0, "a number >= 0 (0 = off)"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.data.mixup_alpha = v.number(); }),
      train_only(flag("cutmix-alpha", FlagType::number, typed(d.data.cutmix_alpha), Topic::data,
                      "cutmix of each batch with itself rolled by one, lambda ~ Beta(alpha, alpha)", {},
                      at_least(0, "a number >= 0 (0 = off)"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.data.cutmix_alpha = v.number(); }),
      train_only(flag("ra-sampler", FlagType::boolean, typed(d.data.ra_repetitions > 0), Topic::data,
                      "repeated augmentation: each image --ra-reps times per epoch, on different ranks, with "
                      "different augmentations (torchvision's RASampler)",
                      {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) {
                   c.data.ra_repetitions = v.boolean() ? int(v.flags.integer("ra-reps")) : 0;
                 }),
      // No field of its own: the config holds the repetitions only with --ra-sampler (ra_repetitions,
      // 0 = off), so torchvision's 3 is the row's.
      train_only(flag("ra-reps", FlagType::integer, "3", Topic::data, "--ra-sampler: repetitions of each image", {},
                      within(1, 1024, "in [1, 1024]"), kCourse),
                 nullptr),  // read by --ra-sampler's setter
  };
}

std::vector<FlagRow> optimisation_rows() {
  const TrainConfig d;  // the defaults (Note [Defaults from the config])
  return {
      train_only(flag("epochs", FlagType::integer, typed(d.loop.epochs), Topic::optimisation,
                      "passes over the training set", {}, at_least(1, "a positive integer"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.loop.epochs = v.integer(); }),
      train_only(flag("steps", FlagType::integer, typed(d.loop.max_steps), Topic::optimisation,
                      "stop after this many optimizer steps in total (0 = no limit)", {},
                      at_least(0, "an integer >= 0 (0 = no limit)")),
                 [](const FlagValue& v, TrainConfig& c) { c.loop.max_steps = v.integer(); }),
      train_only(flag("optimizer", FlagType::string, name_in(kOptimizers, d.optimizer.kind), Topic::optimisation,
                      "optimizer", names_of(kOptimizers), {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.optimizer.kind = choice(v, kOptimizers); }),
      train_only(flag("lr", FlagType::number, typed(d.optimizer.lr), Topic::optimisation, "peak learning rate", {},
                      at_least(0, "a number >= 0 (the peak learning rate)"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.optimizer.lr = v.number(); }),
      train_only(flag("momentum", FlagType::number, typed(d.optimizer.momentum), Topic::optimisation, "SGD momentum",
                      {}, at_least(0, "a number >= 0 (0 = plain SGD)"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.optimizer.momentum = v.number(); }),
      train_only(flag("nesterov", FlagType::boolean, typed(d.optimizer.nesterov), Topic::optimisation,
                      "Nesterov momentum (SGD)", {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.optimizer.nesterov = v.boolean(); }),
      train_only(flag("weight-decay", FlagType::number, typed(d.optimizer.weight_decay), Topic::optimisation,
                      "weight decay (SGD: L2 added to the gradient; AdamW: decoupled)", {},
                      at_least(0, "a number >= 0 (0 = no weight decay)"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.optimizer.weight_decay = v.number(); }),
      train_only(flag("no-bn-bias-decay", FlagType::boolean, typed(d.optimizer.no_bn_bias_decay), Topic::optimisation,
                      "exempt batch-norm weights and biases (every 1-D parameter) from weight decay", {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.optimizer.no_bn_bias_decay = v.boolean(); }),
      train_only(
          flag("norm-weight-decay", FlagType::string, decay_text(d.optimizer.norm_weight_decay), Topic::optimisation,
               "weight decay of batch-norm weights and biases; none = --weight-decay", {}, {}, kCourse),
          [](const FlagValue& v, TrainConfig& c) { c.optimizer.norm_weight_decay = decay_or_none(v); }),
      train_only(
          flag("bias-weight-decay", FlagType::string, decay_text(d.optimizer.bias_weight_decay), Topic::optimisation,
               "weight decay of every parameter named bias (batch norm's too); none = --weight-decay", {}, {}, kCourse),
          [](const FlagValue& v, TrainConfig& c) { c.optimizer.bias_weight_decay = decay_or_none(v); }),
      train_only(flag("lars-eta", FlagType::number, typed(d.optimizer.lars_eta), Topic::optimisation,
                      "--optimizer lars: the trust coefficient of the layer-wise lr", {}, at_least(0, "a number >= 0"),
                      kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.optimizer.lars_eta = v.number(); }),
      train_only(
          flag("lars-exclude-bn-bias", FlagType::boolean, typed(d.optimizer.lars_exclude_bn_bias), Topic::optimisation,
               "--optimizer lars: batch-norm parameters and biases take plain momentum SGD without weight "
               "decay (MLPerf's rule); false: LARS for every parameter",
               {}, {}, kCourse),
          [](const FlagValue& v, TrainConfig& c) { c.optimizer.lars_exclude_bn_bias = v.boolean(); }),
      train_only(flag("clip-grad-norm", FlagType::number, typed(d.optimizer.clip_grad_norm), Topic::optimisation,
                      "clip the gradients' total 2-norm to this before each step (0 = off)", {},
                      at_least(0, "a number >= 0 (0 = off)"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.optimizer.clip_grad_norm = v.number(); }),
      train_only(flag("model-ema", FlagType::boolean, typed(d.ema.enabled), Topic::optimisation,
                      "keep an exponential moving average of the weights, evaluate it after each epoch next to the "
                      "model and save it as model_ema.safetensors",
                      {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.ema.enabled = v.boolean(); }),
      train_only(flag("model-ema-steps", FlagType::integer, typed(d.ema.steps), Topic::optimisation,
                      "--model-ema: iterations between updates of the average", {}, at_least(1, "a positive integer"),
                      kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.ema.steps = v.integer(); }),
      train_only(flag("model-ema-decay", FlagType::number, typed(d.ema.decay), Topic::optimisation,
                      "--model-ema: decay per image, adjusted by world size x batch size x --model-ema-steps / "
                      "--epochs as torchvision does",
                      {}, within(0, 1, "in [0, 1]"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.ema.decay = v.number(); }),
      both(flag("label-smoothing", FlagType::number, typed(d.label_smoothing), Topic::optimisation,
                "label smoothing of the cross-entropy loss (eval: of the reported loss)", {},
                within(0, 1, "in [0, 1] (0 = none)"), kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.label_smoothing = v.number(); }),
  };
}

// The optimisation section's second half: the learning-rate schedule and what a step is.
std::vector<FlagRow> schedule_rows() {
  const TrainConfig d;  // the defaults (Note [Defaults from the config])
  return {
      train_only(
          flag("lr-scheduler", FlagType::string, optim::lr_schedule_name(d.lr_schedule.kind), Topic::optimisation,
               "learning-rate schedule after warmup", {"constant", "step", "multistep", "cosine", "poly"}, {}, kCourse),
          [](const FlagValue& v, TrainConfig& c) { c.lr_schedule.kind = optim::parse_lr_schedule(v.str()); }),
      train_only(flag("lr-warmup-epochs", FlagType::integer, typed(d.lr_schedule.warmup_epochs), Topic::optimisation,
                      "warmup length in epochs", {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.lr_schedule.warmup_epochs = v.integer(); }),
      train_only(flag("lr-warmup-method", FlagType::string, name_in(kWarmupMethods, d.lr_schedule.warmup_method),
                      Topic::optimisation,
                      "warmup: linear from lr * --lr-warmup-decay up to lr (torchvision's LinearLR), constant at "
                      "lr * --lr-warmup-decay (ConstantLR), or mlperf: linear from 0, and with --lr-scheduler poly "
                      "MLPerf ResNet-50's decay to --lr-min",
                      names_of(kWarmupMethods), {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.lr_schedule.warmup_method = choice(v, kWarmupMethods); }),
      train_only(flag("lr-warmup-decay", FlagType::number, typed(d.lr_schedule.warmup_decay), Topic::optimisation,
                      "the warmup's factor of lr (linear: at its first step)",
                      // LinearLR's rule: a start factor of 0 would make the first step a no-op.
                      {}, Range{0, 1, true, "in (0, 1]"}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.lr_schedule.warmup_decay = v.number(); }),
      // Another schedule's flags are not looked at (torchvision ignores them too): their
      // checks are in check_combinations, for the schedule chosen.
      train_only(flag("lr-step-size", FlagType::integer, typed(d.lr_schedule.step_size), Topic::optimisation,
                      "step schedule: epochs between decays", {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.lr_schedule.step_size = v.integer(); }),
      train_only(flag("lr-milestones", FlagType::string, milestones_text(d.lr_schedule.milestones), Topic::optimisation,
                      "multistep schedule: epochs at which lr decays", {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) {
                   if (v.flags.str("lr-scheduler") == "multistep")
                     c.lr_schedule.milestones = optim::parse_milestones(v.str());
                 }),
      train_only(flag("lr-gamma", FlagType::number, typed(d.lr_schedule.gamma), Topic::optimisation,
                      "step/multistep decay factor", {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.lr_schedule.gamma = v.number(); }),
      train_only(flag("lr-min", FlagType::number, typed(d.lr_schedule.lr_min), Topic::optimisation,
                      "cosine and poly: final learning rate", {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.lr_schedule.lr_min = v.number(); }),
      train_only(flag("lr-power", FlagType::number, typed(d.lr_schedule.power), Topic::optimisation,
                      "poly schedule: power", {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.lr_schedule.power = v.number(); }),
      train_only(flag("accum-steps", FlagType::integer, typed(d.loop.accum_steps), Topic::optimisation,
                      "micro-batches per optimizer step (gradient accumulation)", {},
                      at_least(1, "a positive integer (micro-batches per step)"), kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.loop.accum_steps = v.integer(); }),
      train_only(flag("skip-nonfinite", FlagType::boolean, typed(d.loop.skip_nonfinite), Topic::optimisation,
                      "skip steps whose loss, gradients or updated weights are NaN/Inf (the step leaves the weights "
                      "and optimizer state as they were) instead of stopping. On CUDA it reads the loss on the host "
                      "every step (without it, the loss stays on the device and a NaN/Inf is found at the next "
                      "--print-freq step or checkpoint)"),
                 [](const FlagValue& v, TrainConfig& c) { c.loop.skip_nonfinite = v.boolean(); }),
      both(flag("seed", FlagType::integer, typed(d.seed), Topic::optimisation,
                "seed of initialisation, data order, augmentation and synthetic data", {}, {}, kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.seed = uint64_t(v.integer()); }),
  };
}

std::vector<FlagRow> device_rows() {
  const TrainConfig d;  // the defaults (Note [Defaults from the config])
  return {
      both(flag("device", FlagType::string, d.compute.device ? d.compute.device->str() : "auto", Topic::device,
                "cpu, cuda or cuda:N; auto = cuda:0 when a GPU is present, else cpu"),
           [](const FlagValue& v, CommonConfig& c) {
             c.compute.device = v.str() == "auto" ? std::nullopt : std::optional<Device>(Device::parse(v.str()));
           }),
      both(flag("precision", FlagType::string, d.compute.precision ? precision_name(*d.compute.precision) : "auto",
                Topic::device,
                "what convolutions, linear layers and activations compute in; bf16/fp16 keep fp32 master weights, "
                "batch norm and loss (fp16 adds loss scaling), tf32 = fp32 with TF32 tensor cores; auto = bf16 on a "
                "GPU of compute capability 8.0+, else fp32",
                {"auto", "fp32", "tf32", "bf16", "fp16"}, {}, kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.compute.precision = parse_precision(v.str()); }),
      both(flag("memory-format", FlagType::string, name_in(kMemoryFormats, d.model.memory_format), Topic::device,
                "activation and weight layout; auto = channels_last (the faster one on CPU and GPU)",
                names_of(kMemoryFormats), {}, kCourse),
           [](const FlagValue& v, CommonConfig& c) { c.model.memory_format = choice(v, kMemoryFormats); }),
      // Part of the trajectory (bit-exact resume depends on it) but not compared across ranks:
      // each rank's CPU math is its own computation whatever its thread count.
      both(flag("threads", FlagType::integer, typed(d.compute.threads), Topic::device,
                "CPU threads for the math (0 = all cores)", {},
                within(0, kMaxThreads, bounds(0, kMaxThreads) + " (0 = all cores)"), kTrajectory),
           [](const FlagValue& v, CommonConfig& c) { c.compute.threads = int(v.integer()); }),
      train_only(flag("cudnn-benchmark", FlagType::boolean, typed(d.compute.cudnn_benchmark), Topic::device,
                      "CUDA: time cuDNN's candidate algorithms per convolution shape and keep the fastest (ignored "
                      "on the CPU)"),
                 [](const FlagValue& v, TrainConfig& c) { c.compute.cudnn_benchmark = v.boolean(); }),
      train_only(flag("cudnn-benchmark-runtime-compiled", FlagType::boolean,
                      typed(d.compute.cudnn_benchmark_runtime_compiled), Topic::device,
                      "with --cudnn-benchmark: also time the engines cuDNN compiles at run time (each compiles when "
                      "first tried, which can take seconds per shape; without this flag they are skipped unless "
                      "nothing else fits)"),
                 [](const FlagValue& v, TrainConfig& c) { c.compute.cudnn_benchmark_runtime_compiled = v.boolean(); }),
      // Not part of the trajectory: the graph replays the eager step's kernels in their order.
      train_only(flag("cuda-graphs", FlagType::boolean, typed(d.compute.cuda_graphs), Topic::device,
                      "CUDA: capture the training step (forward, loss, backward, update) as a CUDA graph and launch "
                      "it whole; a setting that prevents it is named once on stderr and the step runs eagerly"),
                 [](const FlagValue& v, TrainConfig& c) { c.compute.cuda_graphs = v.boolean(); }),
  };
}

std::vector<FlagRow> distributed_rows() {
  const TrainConfig d;  // the defaults (Note [Defaults from the config])
  return {
      train_only(flag("nproc-per-node", FlagType::integer, typed(d.parallel.nproc_per_node), Topic::distributed,
                      "start this many training processes on this machine (one per GPU; on the CPU, processes "
                      "sharing the cores) with torchrun's environment, and supervise them; 1 = train in this process",
                      {}, within(1, 1024, "in [1, 1024] (processes on this machine)"), kLauncher),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.nproc_per_node = int(v.integer()); }),
      train_only(flag("nnodes", FlagType::integer, typed(d.parallel.nnodes), Topic::distributed,
                      "machines taking part (run the same command on each, with --node-rank)", {},
                      within(1, 65536, "in [1, 65536] (machines)"), kLauncher),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.nnodes = int(v.integer()); }),
      train_only(flag("node-rank", FlagType::integer, typed(d.parallel.node_rank), Topic::distributed,
                      "this machine's index among --nnodes", {}, {}, kLauncher),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.node_rank = int(v.integer()); }),
      train_only(flag("master-addr", FlagType::string, typed(d.parallel.master_addr), Topic::distributed,
                      "the address of the machine with --node-rank 0", {}, {}, kLauncher),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.master_addr = v.str(); }),
      train_only(flag("master-port", FlagType::integer, typed(d.parallel.master_port), Topic::distributed,
                      "rank 0's rendezvous port (0 = a free one; needed with --nnodes > 1)", {},
                      within(0, 65535, "in [0, 65535] (0 = a free port)"), kLauncher),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.master_port = int(v.integer()); }),
      train_only(flag("max-restarts", FlagType::integer, typed(d.parallel.max_restarts), Topic::distributed,
                      "when a rank fails, stop the others and start every rank again from the run's last "
                      "checkpoint, at most this many times (torchrun's flag; every node's launcher takes part)",
                      {}, within(0, 1000, "in [0, 1000] (restarts)"), kLauncher),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.max_restarts = int(v.integer()); }),
      train_only(flag("rdzv-timeout", FlagType::number, typed(d.parallel.rdzv_timeout_s), Topic::distributed,
                      "with --nnodes > 1 and --max-restarts: seconds each node's launcher waits for the others to "
                      "join a round; a node that does not come ends the job, named",
                      {}, Range{0, 1e7, true, "in (0, 10000000] seconds"}, kLauncher),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.rdzv_timeout_s = v.number(); }),
      train_only(
          flag("allreduce", FlagType::string, dist::algo_name(d.parallel.allreduce), Topic::distributed,
               "gradient all-reduce: the backend's own, or ringtape's ring or tree", {"library", "ring", "tree"}, {},
               kSameOnEveryRank),
          [](const FlagValue& v, TrainConfig& c) { c.parallel.allreduce = dist::parse_allreduce_algo(v.str()); }),
      // A bucket holds at least one byte: 1e-30 MiB passed once and failed in every worker.
      train_only(flag("bucket-cap-mb", FlagType::number, typed(d.parallel.bucket_cap_mb), Topic::distributed,
                      "gradient bucket size in MiB (the first bucket: at most " +
                          as_typed(double(dist::ReducerOptions{}.first_bucket_bytes) / double(1 << 20)) + " MiB)",
                      {}, within(1e-6, 1 << 20, "in [0.000001, 1048576] (MiB; a bucket holds a byte at least)"),
                      kSameOnEveryRank),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.bucket_cap_mb = v.number(); }),
      train_only(flag("find-unused-parameters", FlagType::boolean, typed(d.parallel.find_unused_parameters),
                      Topic::distributed,
                      "reduce zeros for parameters that got no gradient (else that is an error naming them)", {}, {},
                      kSameOnEveryRank),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.find_unused_parameters = v.boolean(); }),
      train_only(flag("timeout", FlagType::number, typed(d.parallel.timeout_s), Topic::distributed,
                      "seconds any collective or the rendezvous may take before the run stops naming the lost rank", {},
                      Range{0, 1e7, true, "in (0, 10000000] seconds"}),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.timeout_s = v.number(); }),
      train_only(flag("trace-buffer", FlagType::integer, typed(d.parallel.trace_buffer), Topic::distributed,
                      "collectives each rank's flight recorder keeps (0: off); written to logs/flight-rank-K.json "
                      "when a collective fails, on SIGUSR1 and at a fatal signal, and analysed by the launcher "
                      "(ringtape analyze RUN_DIR)",
                      {}, within(0, 1 << 20, "in [0, 1048576] (collectives; 0 = off)")),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.trace_buffer = v.integer(); }),
      train_only(
          flag("straggler-threshold", FlagType::number, typed(d.parallel.straggler_threshold), Topic::distributed,
               "a rank whose step (less its wait for the others) is longer than the ranks' median by more "
               "than this fraction in " +
                   std::to_string(train::kStragglerWindows) +
                   " consecutive --print-freq windows is named in the log with its slow phase",
               {}, Range{0, 100, true, "in (0, 100] (a fraction: 0.2 = 20%)"}),
          [](const FlagValue& v, TrainConfig& c) { c.parallel.straggler_threshold = v.number(); }),
      train_only(flag("comm-timeline", FlagType::boolean, typed(d.parallel.comm_timeline), Topic::distributed,
                      "rank 0 writes every step's gradient buckets (bytes; when ready, launched, completed) and phase "
                      "times to <output-dir>/timeline.jsonl, the input of bench/dp_scaling_model.py"),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.comm_timeline = v.boolean(); }),
      train_only(flag("grad-reduce-dtype", FlagType::string, name_in(kReduceDtypes, d.parallel.grad_reduce_dtype),
                      Topic::distributed,
                      "the dtype the gradient all-reduce carries: fp32, or bf16 for half the bytes (NCCL only; the "
                      "average then carries bf16's rounding; the optimizer still reads f32)",
                      names_of(kReduceDtypes), {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.grad_reduce_dtype = choice(v, kReduceDtypes); }),
      train_only(flag("sync-bn", FlagType::boolean, typed(d.parallel.sync_bn), Topic::distributed,
                      "batch-norm statistics and their gradients over every process's batch (PyTorch's "
                      "SyncBatchNorm), so N processes x --batch-size B train like one process with batch N*B; two "
                      "small blocking collectives per batch norm and step, on a communicator of their own (Gloo on "
                      "CPU processes, NCCL on GPUs). A no-op in one process",
                      {}, {}, kCourse),
                 [](const FlagValue& v, TrainConfig& c) { c.parallel.sync_bn = v.boolean(); }),
  };
}

std::vector<FlagRow> output_rows() {
  const TrainConfig d;  // the defaults (Note [Defaults from the config])
  return {
      train_only(flag("output-dir", FlagType::string, typed(d.output.output_dir), Topic::output,
                      "where checkpoints, weights and metrics go (default: the --resume checkpoint's directory, else "
                      "runs/<dataset>-<model>-<time>)"),
                 [](const FlagValue& v, TrainConfig& c) { c.output.output_dir = v.str(); }),
      train_only(flag("resume", FlagType::string, typed(d.output.resume), Topic::output,
                      "continue from this checkpoint (bit-exact on CPU)"),
                 [](const FlagValue& v, TrainConfig& c) { c.output.resume = v.str(); }),
      train_only(flag("test-only", FlagType::boolean, typed(d.loop.test_only), Topic::output,
                      "only evaluate the weights of --resume (and its EMA weights with --model-ema) or "
                      "--init-weights, then stop"),
                 [](const FlagValue& v, TrainConfig& c) { c.loop.test_only = v.boolean(); }),
      train_only(flag("checkpoint-every", FlagType::integer, typed(d.output.checkpoint_every), Topic::output,
                      "also checkpoint every N optimizer steps (0 = per epoch)", {},
                      at_least(0, "an integer >= 0 (0 = once per epoch)")),
                 [](const FlagValue& v, TrainConfig& c) { c.output.checkpoint_every = v.integer(); }),
      train_only(flag("print-freq", FlagType::integer, typed(d.output.print_freq), Topic::output,
                      "log every N optimizer steps", {}, at_least(1, "a positive integer (log every N steps)")),
                 [](const FlagValue& v, TrainConfig& c) { c.output.print_freq = v.integer(); }),
      train_only(flag("no-progress", FlagType::boolean, typed(!d.output.progress_bar), Topic::output,
                      "print the --print-freq lines instead of the progress bar drawn when stdout is a terminal"),
                 [](const FlagValue& v, TrainConfig& c) { c.output.progress_bar = !v.boolean(); }),
      train_only(flag("tensorboard", FlagType::boolean, typed(d.output.tensorboard), Topic::output,
                      "write TensorBoard scalars (training loss, lr, img/s; evaluation loss, top-1, top-5) to "
                      "--tensorboard-dir"),
                 [](const FlagValue& v, TrainConfig& c) { c.output.tensorboard = v.boolean(); }),
      train_only(flag("tensorboard-dir", FlagType::string, typed(d.output.tensorboard_dir), Topic::output,
                      "with --tensorboard: the events' directory (default <output-dir>/tensorboard)"),
                 [](const FlagValue& v, TrainConfig& c) { c.output.tensorboard_dir = v.str(); }),
  };
}

std::vector<FlagRow> profiling_rows() {
  const TrainConfig d;  // the defaults (Note [Defaults from the config])
  return {
      both(flag("profile-steps", FlagType::string, profile_steps_text(d.profile), Topic::profiling,
                "profile steps A..B-1 (A:B, 1-based like the log lines; eval: batches): print the table, write "
                "profile.json and trace.json (Chrome trace: Perfetto, chrome://tracing), then go on unprofiled"),
           [](const FlagValue& v, CommonConfig& c) {
             try {
               c.profile = prof::parse_profile_steps(v.str(), v.flags.str("profile-group"));
             } catch (const Error& e) {
               throw UsageError("--profile-steps: " + std::string(e.what()));
             }
           }),
      both(flag("profile-group", FlagType::string, prof::group_name(d.profile.group), Topic::profiling,
                "the profile table's rows", {"op", "layer", "kernel"}),
           nullptr),  // read with --profile-steps
      both(flag("profile-dir", FlagType::string, typed(d.profile_dir), Topic::profiling,
                "where profile.json and trace.json go (default: train: the output directory; eval: the current one)"),
           [](const FlagValue& v, CommonConfig& c) { c.profile_dir = v.str(); }),
  };
}

// "--name must be <rule>, got <value>"; for a value the recipe set, which the user did not
// type, also that the recipe sets it and how to override it.
[[noreturn]] void bad_value(const Flags& f, const std::string& name, const std::string& rule) {
  std::string msg = "--" + name + " must be " + rule + ", got " + f.str(name);
  if (const std::string r = f.recipe_of(name); !r.empty())
    msg += ": the recipe " + r + " sets --" + name + " " + f.str(name) + "; pass --" + name + " N (" + rule +
           ") to override it";
  throw UsageError(msg);
}

// The datasets that have `property`, for messages: "imagenet or webdataset" (Note [Dataset properties]).
std::string datasets_with(bool data::DatasetEntry::*property) {
  std::string s;
  for (const data::DatasetEntry& e : data::dataset_registry())
    if (e.*property) s += (s.empty() ? "" : " or ") + e.name;
  return s;
}

// The first dataset of the JPEG pipeline read example by example: what repeated augmentation
// of sharded images needs instead.
std::string image_folders() {
  for (const data::DatasetEntry& e : data::dataset_registry())
    if (e.image_pipeline && !e.sharded) return e.name;
  return "";
}

// Whether the flag has a value other than its row's default (compared as integers for an
// integer flag, so "09" is the default 9).
bool non_default(const Flags& f, const std::string& name) {
  for (const Flag& x : f.table())
    if (x.name == name)
      return x.type == FlagType::integer ? f.integer(name) != std::stoll(x.default_value)
                                         : f.str(name) != x.default_value;
  return false;
}

// "--name (which the recipe R sets)" for a value the recipe set, else "--name".
std::string flag_as_set(const Flags& f, const std::string& name) {
  const std::string r = f.recipe_of(name);
  return "--" + name + (r.empty() ? "" : " " + f.str(name) + " (the recipe " + r + " sets --" + name + " " +
                                             f.str(name) + ")");
}

void check_schedule(const Flags& f) {
  if (f.str("optimizer") == "sgd" && f.boolean("nesterov") && f.number("momentum") <= 0)
    throw UsageError("--nesterov needs --momentum > 0 (PyTorch's SGD refuses it too), got --momentum " +
                          f.str("momentum"));
  const int64_t epochs = f.integer("epochs"), warmup = f.integer("lr-warmup-epochs");
  if (warmup < 0 || warmup > epochs)
    bad_value(f, "lr-warmup-epochs", "in [0, --epochs] = [0, " + std::to_string(epochs) + "]");
  const std::string kind = f.str("lr-scheduler");
  if (kind == "step" && f.integer("lr-step-size") < 1) bad_value(f, "lr-step-size", "at least 1 (epochs)");
  if ((kind == "step" || kind == "multistep") && f.number("lr-gamma") < 0) bad_value(f, "lr-gamma", "a number >= 0");
  if (kind == "multistep") {
    std::vector<int64_t> m;
    try {
      m = optim::parse_milestones(f.str("lr-milestones"));
    } catch (const Error&) {
      m.clear();
    }
    bool ok = !m.empty();
    for (size_t i = 0; i < m.size(); ++i) ok = ok && m[i] >= 1 && (i == 0 || m[i] > m[i - 1]);
    if (!ok) bad_value(f, "lr-milestones", "increasing epoch numbers >= 1 separated by commas, e.g. 30,60,80");
  }
  if (kind == "cosine" && (f.number("lr-min") < 0 || f.number("lr-min") > f.number("lr")))
    bad_value(f, "lr-min", "in [0, --lr] = [0, " + f.str("lr") + "]");
  if (kind == "poly" && f.number("lr-power") <= 0) bad_value(f, "lr-power", "a number > 0");
}

}  // namespace

const std::vector<FlagRow>& flag_rows() {
  static const std::vector<FlagRow> rows = [] {
    std::vector<FlagRow> all;
    for (auto part : {model_rows, data_rows, optimisation_rows, schedule_rows, device_rows, distributed_rows,
                      output_rows, profiling_rows})
      for (FlagRow& r : part()) all.push_back(std::move(r));
    return all;
  }();
  return rows;
}

std::vector<Flag> train_flags() {
  std::vector<Flag> v;
  for (const FlagRow& r : flag_rows())
    if (!r.eval_only) v.push_back(r.flag);
  return v;
}

std::vector<Flag> eval_flags() {
  std::vector<Flag> v;
  for (const FlagRow& r : flag_rows())
    if (!r.train_only) v.push_back(r.flag);
  return v;
}

std::set<std::string> train_flags_with(FlagRole role) {
  std::set<std::string> names;
  for (const FlagRow& r : flag_rows())
    if (!r.eval_only && (r.flag.roles & role)) names.insert(r.flag.name);
  return names;
}

std::optional<std::array<int64_t, 4>> parse_synthetic_size(const std::string& text) {
  std::array<int64_t, 4> v{};
  int used = 0;
  if (std::sscanf(text.c_str(), "%ldx%ldx%ldx%ld%n", &v[0], &v[1], &v[2], &v[3], &used) != 4 ||
      size_t(used) != text.size())
    return std::nullopt;
  int64_t elements = 1;
  for (int64_t d : v)
    if (d <= 0 || __builtin_mul_overflow(elements, d, &elements)) return std::nullopt;
  return v;
}

void check_combinations(const Flags& f) {
  if (f.has("lr")) check_schedule(f);
  if (f.has("node-rank") && (f.integer("node-rank") < 0 || f.integer("node-rank") >= f.integer("nnodes")))
    bad_value(f, "node-rank", "in [0, --nnodes) = [0, " + f.str("nnodes") + ")");
  if (f.has("nnodes") && f.integer("nnodes") > 1 && f.integer("master-port") == 0)
    throw UsageError("--nnodes " + f.str("nnodes") +
                     " needs --master-port (the same on every machine, e.g. --master-port 29500)");
  const std::string width = f.str("width");
  if (width != "auto") {
    char* end = nullptr;
    errno = 0;
    const long long w = std::strtoll(width.c_str(), &end, 10);
    if (width.empty() || *end != '\0' || errno != 0 || w <= 0 || w > kMaxWidth)
      bad_value(f, "width", "auto or an integer in [1, " + std::to_string(kMaxWidth) + "]");
  }
  const data::DatasetEntry& dataset = data::find_dataset(f.str("dataset"));  // Note [Dataset properties]
  if ((dataset.generated || f.given("synthetic-size")) && !parse_synthetic_size(f.str("synthetic-size")))
    bad_value(f, "synthetic-size",
              "N x C x H x W with four positive integers whose product fits in int64, e.g. 1024x3x32x32");
  if (f.str("stem-stride") == "2" && f.str("small-stem") == "false")
    throw UsageError("--stem-stride 2 needs the small stem; drop --small-stem false or --stem-stride 2");

  for (const char* name : {"norm-weight-decay", "bias-weight-decay"}) {
    if (!f.has(name) || f.str(name) == "none") continue;
    char* end = nullptr;
    const std::string s = f.str(name);
    const double d = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !std::isfinite(d) || d < 0)
      bad_value(f, name, "none (--weight-decay applies) or a number >= 0");
    if (f.boolean("no-bn-bias-decay"))
      throw UsageError("--no-bn-bias-decay and --" + std::string(name) +
                       " both set the decay of batch-norm parameters and biases; pass one of them");
  }
  if (f.has("shuffle-buffer") && f.given("shuffle-buffer") && !dataset.sharded)
    throw UsageError("--shuffle-buffer applies to --dataset " + datasets_with(&data::DatasetEntry::sharded) +
                     " (shards read in order), not to " + f.str("dataset") +
                     ", whose examples are shuffled as a whole; drop it");
  if (f.given("val-data-path") && !dataset.sharded)
    throw UsageError("--val-data-path applies to --dataset " + datasets_with(&data::DatasetEntry::sharded) +
                     " (the evaluation shards), not to " + f.str("dataset") + "; drop it");
  if (f.has("auto-augment") && f.str("auto-augment") != "none" && !dataset.image_pipeline)
    throw UsageError("--auto-augment " + f.str("auto-augment") + " applies to --dataset " +
                     datasets_with(&data::DatasetEntry::image_pipeline) +
                     " (RGB images through the JPEG pipeline), not to " + f.str("dataset") + "; drop --auto-augment");
  if (f.has("test-only") && f.boolean("test-only") && f.str("resume").empty() && f.str("init-weights").empty())
    throw UsageError("--test-only evaluates the weights of --resume CHECKPOINT or --init-weights FILE; give one");
  // An --init-weights file is one model's state; the EMA's weights are in a checkpoint only.
  if (f.has("test-only") && f.boolean("test-only") && f.boolean("model-ema") && !f.str("init-weights").empty())
    throw UsageError("--test-only --model-ema evaluates the EMA weights of a --resume checkpoint, but --init-weights " +
                     f.str("init-weights") + " holds no EMA weights (one model's state). Evaluate an EMA's weights "
                     "file (model_ema.safetensors) as --init-weights without --model-ema, or pass the run's "
                     "checkpoint as --resume");
  // The policy options of another policy would be ignored (torchvision ignores them silently).
  if (f.has("ra-magnitude") && non_default(f, "ra-magnitude") &&
      f.str("auto-augment") != "ra")
    throw UsageError("--ra-magnitude applies to --auto-augment ra (RandAugment), not to --auto-augment " +
                     f.str("auto-augment") + "; add --auto-augment ra or drop --ra-magnitude");
  if (f.has("augmix-severity") && non_default(f, "augmix-severity") &&
      f.str("auto-augment") != "augmix")
    throw UsageError("--augmix-severity applies to --auto-augment augmix, not to --auto-augment " +
                     f.str("auto-augment") + "; add --auto-augment augmix or drop --augmix-severity");
  // Shards are read in sequence (Note [Shard order]), without the permutation of every
  // example that repeated augmentation draws from (data/loading/sampler.cc refuses it too).
  if (f.has("ra-sampler") && f.boolean("ra-sampler") && dataset.sharded)
    throw UsageError(flag_as_set(f, "ra-sampler") + ": repeated augmentation draws from a permutation of all "
                     "examples, which --dataset " + f.str("dataset") + " (shards read in sequence) does not have; "
                     "turn it off with --ra-sampler false, or train on the image folders with --dataset " +
                     image_folders());

  // Where the weights come from.
  if (f.has("resume") && !f.str("resume").empty() && !f.str("init-weights").empty())
    throw UsageError("--init-weights and --resume both give the weights (the checkpoint's would replace the "
                     "initial ones); pass one of them");
  if (f.has("checkpoint") && !f.str("checkpoint").empty() && !f.str("init-weights").empty())
    throw UsageError("--checkpoint and --init-weights both give the weights to evaluate; pass one of them");
  if (f.boolean("init-weights-non-strict") && f.str("init-weights").empty())
    throw UsageError("--init-weights-non-strict applies to --init-weights, which is not given");
  if (f.has("cudnn-benchmark-runtime-compiled") && f.boolean("cudnn-benchmark-runtime-compiled") &&
      !f.boolean("cudnn-benchmark"))
    throw UsageError("--cudnn-benchmark-runtime-compiled applies to --cudnn-benchmark, which is not given");
  if (f.has("tensorboard-dir") && !f.str("tensorboard-dir").empty() && !f.boolean("tensorboard"))
    throw UsageError("--tensorboard-dir applies to --tensorboard, which is not given");
}

// Each row's setter puts its flag's value into its field (Note [One row per flag]); the
// checks ran first (Flags::parse: types, choices, ranges; check_combinations: the rest), so
// nothing here re-checks a value.
TrainConfig parse_train_config(const Flags& f) {
  check_combinations(f);
  TrainConfig c;
  for (const FlagRow& r : flag_rows()) {
    const FlagValue v{f, r.flag.name};
    if (r.common) r.common(v, c);
    if (r.train) r.train(v, c);
  }
  c.recorded_flags = f.effective();
  c.trajectory_flags = train_flags_with(kTrajectory);
  c.same_on_every_rank_flags = train_flags_with(kSameOnEveryRank);
  return c;
}

EvalConfig parse_eval_config(const Flags& f) {
  check_combinations(f);
  if (f.str("checkpoint").empty() && f.str("init-weights").empty())
    throw UsageError("ringtape eval needs weights: --init-weights FILE.safetensors or --checkpoint FILE");
  EvalConfig c;
  for (const FlagRow& r : flag_rows()) {
    const FlagValue v{f, r.flag.name};
    if (r.common) r.common(v, c);
    if (r.eval) r.eval(v, c);
  }
  return c;
}

}  // namespace rt::cli
