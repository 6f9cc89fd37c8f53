#include "train/train_flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "engine/error.h"
#include "models/registry.h"
#include "optim/schedule.h"

namespace rt::train {
namespace {

using cli::Flag;
using cli::FlagType;

std::vector<Flag> model_and_data_flags() {
  return {
      {"profile-steps", FlagType::string, "",
       "profile steps A..B-1 (A:B, 1-based like the log lines; eval: batches): print the table, write "
       "profile.json and trace.json (Chrome trace: Perfetto, chrome://tracing), then go on unprofiled", {}},
      {"profile-group", FlagType::string, "op", "the profile table's rows", {"op", "layer", "kernel"}},
      {"profile-dir", FlagType::string, "",
       "where profile.json and trace.json go (default: train: the output directory; eval: the current one)", {}},
      {"model", FlagType::string, "resnet18", "model name", models::model_names()},
      {"width", FlagType::string, "auto",
       "channels of the first stage (torchvision: 64); auto = 64 for images over 64 px, else 16", {}},
      {"small-stem", FlagType::string, "auto",
       "3x3 stride-1 stem without max-pool; auto = on for images of 64 px or less", {"auto", "true", "false"}},
      {"stem-stride", FlagType::string, "auto",
       "small stem's stride; auto = 2 for images of 28 px or less (halves every stage), else 1", {"auto", "1", "2"}},
      {"memory-format", FlagType::string, "auto",
       "activation and weight layout; auto = channels_last (the faster one on CPU and GPU)",
       {"auto", "contiguous", "channels_last"}},
      {"num-classes", FlagType::integer, "0",
       "classifier outputs; 0 = the dataset's class count (at most 1000000)", {}},
      {"dataset", FlagType::string, "fashion-mnist", "dataset",
       {"fashion-mnist", "cifar10", "imagenet", "synthetic", "tensors"}},
      {"data-path", FlagType::string, "",
       "dataset location (fashion-mnist: /usr/share/datasets/fashion-mnist; imagenet: DIR with train/ and val/; "
       "tensors: a .safetensors file)", {}},
      {"train-crop-size", FlagType::integer, "224", "imagenet: RandomResizedCrop output size for training", {}},
      {"val-resize-size", FlagType::integer, "256", "imagenet: evaluation resizes the shorter side to this", {}},
      {"val-crop-size", FlagType::integer, "224", "imagenet: evaluation centre-crops this square", {}},
      {"strict-images", FlagType::boolean, "false",
       "stop at the first unreadable image (default: skip it, name it and count it)", {}},
      {"cache-dir", FlagType::string, "",
       "where the imagenet file lists are cached (default $RINGTAPE_CACHE_DIR, $XDG_CACHE_HOME/ringtape or "
       "~/.cache/ringtape)", {}},
      {"device", FlagType::string, "auto", "cpu, cuda or cuda:N; auto = cuda:0 when a GPU is present, else cpu", {}},
      {"precision", FlagType::string, "auto",
       "what convolutions, linear layers and activations compute in; bf16/fp16 keep fp32 master weights, "
       "batch norm and loss (fp16 adds loss scaling), tf32 = fp32 with TF32 tensor cores; auto = bf16 on a GPU of "
       "compute capability 8.0+, else fp32",
       {"auto", "fp32", "tf32", "bf16", "fp16"}},
      {"batch-size", FlagType::integer, "128", "images per step (per device)", {}},
      {"workers", FlagType::integer, "2", "data loading threads (0 = load in the training thread)", {}},
      {"init-weights", FlagType::string, "",
       "weights to start from: a .safetensors state dict with torchvision's keys, or a ringtape checkpoint (its model "
       "part); every key must match the model (PyTorch's strict loading)", {}},
      {"init-weights-non-strict", FlagType::boolean, "false",
       "load only the --init-weights entries that match the model in name and shape and list the rest (fine-tuning "
       "with a new head)", {}},
      {"synthetic-size", FlagType::string, "1024x3x32x32",
       "synthetic dataset: NxCxHxW (with --dataset synthetic)", {}},
      {"threads", FlagType::integer, "0", "CPU threads for the math (0 = all cores; at most 1024)", {}},
      {"seed", FlagType::integer, "0", "seed of initialisation, data order, augmentation and synthetic data", {}},
  };
}

// Upper bounds of values that are otherwise only "positive". A bound says what no run
// needs, so a typo fails at once instead of as a crash or an allocation of terabytes later.
// --threads is not bounded by this machine's core count: --threads is a trajectory flag
// (Note [Exact resume]), and resuming a run on a smaller machine needs the same count.
constexpr int64_t kMaxThreads = 1024;       // --threads 100000 crashed the OpenMP runtime
constexpr int64_t kMaxWorkers = 1024;       // loader threads
constexpr int64_t kMaxClasses = 1000000;    // ImageNet-21k has 21841; the classifier is width x classes
constexpr int64_t kMaxWidth = 65536;        // torchvision's ResNets have 64

constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The UsageError of flag `name`: "--name must be <rule>, got <value>".
[[noreturn]] void bad_value(const cli::Flags& f, const std::string& name, const std::string& rule) {
  throw cli::UsageError("--" + name + " must be " + rule + ", got " + f.str(name));
}

// Integer flag `name` in [lo, hi], when the command has it (eval has no --epochs).
void int_in(const cli::Flags& f, const std::string& name, int64_t lo, int64_t hi, const std::string& rule) {
  if (f.has(name) && (f.integer(name) < lo || f.integer(name) > hi)) bad_value(f, name, rule);
}

// Number flag `name` in [lo, hi], or in (lo, hi] with `open_lo` (parsing already refused
// NaN and infinities).
void num_in(const cli::Flags& f, const std::string& name, double lo, double hi, bool open_lo,
            const std::string& rule) {
  if (!f.has(name)) return;
  const double v = f.number(name);
  if (v < lo || (open_lo && v == lo) || v > hi) bad_value(f, name, rule);
}

void validate_optimizer_and_schedule(const cli::Flags& f) {
  num_in(f, "lr", 0, kInf, false, "a number >= 0 (the peak learning rate)");
  num_in(f, "momentum", 0, kInf, false, "a number >= 0 (0 = plain SGD)");
  num_in(f, "weight-decay", 0, kInf, false, "a number >= 0 (0 = no weight decay)");
  if (f.str("optimizer") == "sgd" && f.boolean("nesterov") && f.number("momentum") <= 0)
    throw cli::UsageError("--nesterov needs --momentum > 0 (PyTorch's SGD refuses it too), got --momentum " +
                          f.str("momentum"));
  const int64_t epochs = f.integer("epochs");
  int_in(f, "lr-warmup-epochs", 0, epochs, "in [0, --epochs] = [0, " + std::to_string(epochs) + "]");
  // LinearLR's rule: a start factor of 0 would make the first step a no-op.
  num_in(f, "lr-warmup-decay", 0, 1, true, "in (0, 1]");
  const std::string kind = f.str("lr-scheduler");
  if (kind == "step") int_in(f, "lr-step-size", 1, kNoLimit, "at least 1 (epochs)");
  if (kind == "step" || kind == "multistep") num_in(f, "lr-gamma", 0, kInf, false, "a number >= 0");
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
  if (kind == "cosine") num_in(f, "lr-min", 0, f.number("lr"), false, "in [0, --lr] = [0, " + f.str("lr") + "]");
  if (kind == "poly") num_in(f, "lr-power", 0, kInf, true, "a number > 0");
}

}  // namespace

std::optional<std::array<int64_t, 4>> parse_synthetic_size(const std::string& text) {
  std::array<int64_t, 4> v{};
  int used = 0;
  if (std::sscanf(text.c_str(), "%ldx%ldx%ldx%ld%n", &v[0], &v[1], &v[2], &v[3], &used) != 4 ||
      size_t(used) != text.size())
    return std::nullopt;
  for (int64_t d : v)
    if (d <= 0) return std::nullopt;
  return v;
}

void validate_flags(const cli::Flags& f) {
  int_in(f, "batch-size", 1, kNoLimit, "a positive integer (images per step)");
  int_in(f, "epochs", 1, kNoLimit, "a positive integer");
  int_in(f, "steps", 0, kNoLimit, "an integer >= 0 (0 = no limit)");
  int_in(f, "checkpoint-every", 0, kNoLimit, "an integer >= 0 (0 = once per epoch)");
  int_in(f, "print-freq", 1, kNoLimit, "a positive integer (log every N steps)");
  int_in(f, "accum-steps", 1, kNoLimit, "a positive integer (micro-batches per step)");
  if (f.has("nproc-per-node")) {
    int_in(f, "nproc-per-node", 1, 1024, "in [1, 1024] (processes on this machine)");
    int_in(f, "nnodes", 1, 65536, "a positive integer (machines)");
    int_in(f, "node-rank", 0, f.integer("nnodes") - 1, "in [0, --nnodes) = [0, " + f.str("nnodes") + ")");
    int_in(f, "master-port", 0, 65535, "in [0, 65535] (0 = a free port)");
    if (f.integer("nnodes") > 1 && f.integer("master-port") == 0)
      throw cli::UsageError("--nnodes " + f.str("nnodes") +
                            " needs --master-port (the same on every machine, e.g. --master-port 29500)");
    // A bucket holds at least one byte: 1e-30 MiB passed once and failed in every worker.
    num_in(f, "bucket-cap-mb", 1e-6, 1 << 20, false, "in [0.000001, 1048576] (MiB; a bucket holds a byte at least)");
    num_in(f, "timeout", 0, 1e7, true, "in (0, 10000000] seconds");
  }
  int_in(f, "threads", 0, kMaxThreads, "in [0, " + std::to_string(kMaxThreads) + "] (0 = all cores)");
  int_in(f, "workers", 0, kMaxWorkers, "in [0, " + std::to_string(kMaxWorkers) + "] (0 = load in the training thread)");
  int_in(f, "num-classes", 0, kMaxClasses,
         "in [0, " + std::to_string(kMaxClasses) + "] (0 = the dataset's class count)");
  for (const char* crop : {"train-crop-size", "val-resize-size", "val-crop-size"})
    int_in(f, crop, 1, kNoLimit, "a positive number of pixels");
  num_in(f, "label-smoothing", 0, 1, false, "in [0, 1] (0 = none)");
  if (f.has("lr")) validate_optimizer_and_schedule(f);

  const std::string width = f.str("width");
  if (width != "auto") {
    char* end = nullptr;
    errno = 0;
    const long long w = std::strtoll(width.c_str(), &end, 10);
    if (width.empty() || *end != '\0' || errno != 0 || w <= 0 || w > kMaxWidth)
      bad_value(f, "width", "auto or an integer in [1, " + std::to_string(kMaxWidth) + "]");
  }
  if ((f.str("dataset") == "synthetic" || f.given("synthetic-size")) && !parse_synthetic_size(f.str("synthetic-size")))
    bad_value(f, "synthetic-size", "N x C x H x W with four positive integers, e.g. 1024x3x32x32");
  if (f.str("stem-stride") == "2" && f.str("small-stem") == "false")
    throw cli::UsageError("--stem-stride 2 needs the small stem; drop --small-stem false or --stem-stride 2");

  // Where the weights come from.
  if (f.has("resume") && !f.str("resume").empty() && !f.str("init-weights").empty())
    throw cli::UsageError("--init-weights and --resume both give the weights (the checkpoint's would replace the "
                          "initial ones); pass one of them");
  if (f.has("checkpoint") && !f.str("checkpoint").empty() && !f.str("init-weights").empty())
    throw cli::UsageError("--checkpoint and --init-weights both give the weights to evaluate; pass one of them");
  if (f.boolean("init-weights-non-strict") && f.str("init-weights").empty())
    throw cli::UsageError("--init-weights-non-strict applies to --init-weights, which is not given");
  if (f.has("cudnn-benchmark-runtime-compiled") && f.boolean("cudnn-benchmark-runtime-compiled") &&
      !f.boolean("cudnn-benchmark"))
    throw cli::UsageError("--cudnn-benchmark-runtime-compiled applies to --cudnn-benchmark, which is not given");
  if (f.has("tensorboard-dir") && !f.str("tensorboard-dir").empty() && !f.boolean("tensorboard"))
    throw cli::UsageError("--tensorboard-dir applies to --tensorboard, which is not given");
}

std::vector<Flag> train_flags() {
  std::vector<Flag> f = model_and_data_flags();
  const std::vector<Flag> more = {
      {"epochs", FlagType::integer, "15", "passes over the training set", {}},
      {"steps", FlagType::integer, "0", "stop after this many optimizer steps in total (0 = no limit)", {}},
      {"optimizer", FlagType::string, "sgd", "optimizer", {"sgd", "adamw"}},
      {"lr", FlagType::number, "0.1", "peak learning rate", {}},
      {"momentum", FlagType::number, "0.9", "SGD momentum", {}},
      {"nesterov", FlagType::boolean, "false", "Nesterov momentum (SGD)", {}},
      {"weight-decay", FlagType::number, "5e-4", "weight decay (SGD: L2 added to the gradient; AdamW: decoupled)", {}},
      {"no-bn-bias-decay", FlagType::boolean, "false",
       "exempt batch-norm weights and biases (every 1-D parameter) from weight decay", {}},
      {"label-smoothing", FlagType::number, "0", "label smoothing of the cross-entropy loss", {}},
      {"lr-scheduler", FlagType::string, "cosine", "learning-rate schedule after warmup",
       {"constant", "step", "multistep", "cosine", "poly"}},
      {"lr-warmup-epochs", FlagType::integer, "0", "linear warmup length in epochs", {}},
      {"lr-warmup-decay", FlagType::number, "0.01", "warmup starts at lr * this", {}},
      {"lr-step-size", FlagType::integer, "30", "step schedule: epochs between decays", {}},
      {"lr-milestones", FlagType::string, "30,60,80", "multistep schedule: epochs at which lr decays", {}},
      {"lr-gamma", FlagType::number, "0.1", "step/multistep decay factor", {}},
      {"lr-min", FlagType::number, "0", "cosine schedule: final learning rate", {}},
      {"lr-power", FlagType::number, "1", "poly schedule: power", {}},
      {"accum-steps", FlagType::integer, "1", "micro-batches per optimizer step (gradient accumulation)", {}},
      {"no-shuffle", FlagType::boolean, "false", "read the training set in file order", {}},
      {"augment", FlagType::boolean, "true",
       "random crop (padding 2 / 4) and horizontal flip of small images (Fashion-MNIST, CIFAR-10, synthetic); "
       "--augment false turns it off", {}},
      {"zero-init-residual", FlagType::boolean, "false", "zero the last batch-norm weight of every block", {}},
      {"output-dir", FlagType::string, "", "where checkpoints, weights and metrics go (default runs/<time>)", {}},
      {"resume", FlagType::string, "", "continue from this checkpoint (bit-exact on CPU)", {}},
      {"checkpoint-every", FlagType::integer, "0", "also checkpoint every N optimizer steps (0 = per epoch)", {}},
      {"print-freq", FlagType::integer, "50", "log every N optimizer steps", {}},
      {"no-progress", FlagType::boolean, "false",
       "print the --print-freq lines instead of the progress bar drawn when stdout is a terminal", {}},
      {"tensorboard", FlagType::boolean, "false",
       "write TensorBoard scalars (training loss, lr, img/s; evaluation loss, top-1, top-5) to --tensorboard-dir", {}},
      {"tensorboard-dir", FlagType::string, "",
       "with --tensorboard: the events' directory (default <output-dir>/tensorboard)", {}},
      {"skip-nonfinite", FlagType::boolean, "false",
       "skip steps whose loss, gradients or updated weights are NaN/Inf (the step leaves the weights and optimizer "
       "state as they were) instead of stopping. On CUDA it reads the loss on the host every step (without it, "
       "the loss stays on the device and a NaN/Inf is found at the next --print-freq step or checkpoint)", {}},
      {"cudnn-benchmark", FlagType::boolean, "false",
       "CUDA: time cuDNN's candidate algorithms per convolution shape and keep the fastest (ignored on the CPU)", {}},
      {"nproc-per-node", FlagType::integer, "1",
       "start this many training processes on this machine (one per GPU; on the CPU, processes sharing the cores) "
       "with torchrun's environment, and supervise them; 1 = train in this process", {}},
      {"nnodes", FlagType::integer, "1", "machines taking part (run the same command on each, with --node-rank)", {}},
      {"node-rank", FlagType::integer, "0", "this machine's index among --nnodes", {}},
      {"master-addr", FlagType::string, "127.0.0.1", "the address of the machine with --node-rank 0", {}},
      {"master-port", FlagType::integer, "0", "rank 0's rendezvous port (0 = a free one; needed with --nnodes > 1)",
       {}},
      {"allreduce", FlagType::string, "library", "gradient all-reduce: the backend's own, or ringtape's ring or tree",
       {"library", "ring", "tree"}},
      {"bucket-cap-mb", FlagType::number, "25", "data parallel: gradient bucket size in MiB (the first is 1 MiB)", {}},
      {"find-unused-parameters", FlagType::boolean, "false",
       "data parallel: reduce zeros for parameters that got no gradient (else that is an error naming them)", {}},
      {"timeout", FlagType::number, "300",
       "data parallel: seconds any collective or the rendezvous may take before the run stops naming the lost rank",
       {}},
      {"comm-timeline", FlagType::boolean, "false",
       "data parallel: rank 0 writes every step's gradient buckets (bytes; when ready, launched, completed) and "
       "phase times to <output-dir>/timeline.jsonl, the input of bench/dp_scaling_model.py", {}},
      {"grad-reduce-dtype", FlagType::string, "fp32",
       "data parallel: the dtype the gradient all-reduce carries: fp32, or bf16 for half the bytes (NCCL only; "
       "the average then carries bf16's rounding; the optimizer still reads f32)",
       {"fp32", "bf16"}},
      {"sync-bn", FlagType::boolean, "false",
       "data parallel: batch-norm statistics and their gradients over every process's batch (PyTorch's "
       "SyncBatchNorm), so N processes x --batch-size B train like one process with batch N*B; two small blocking "
       "collectives per batch norm and step. A no-op in one process; CPU (Gloo) only for now", {}},
      {"cudnn-benchmark-runtime-compiled", FlagType::boolean, "false",
       "with --cudnn-benchmark: also time the engines cuDNN compiles at run time (each compiles when first tried, "
       "which can take seconds per shape; without this flag they are skipped unless nothing else fits)", {}},
  };
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

std::vector<Flag> eval_flags() {
  std::vector<Flag> f = model_and_data_flags();
  f.push_back({"checkpoint", FlagType::string, "", "a training checkpoint to evaluate (instead of --init-weights)", {}});
  f.push_back({"label-smoothing", FlagType::number, "0", "label smoothing of the reported loss", {}});
  return f;
}

}  // namespace rt::train
