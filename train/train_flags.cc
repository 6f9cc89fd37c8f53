#include "train/train_flags.h"

#include "models/registry.h"

namespace rt::train {
namespace {

using cli::Flag;
using cli::FlagType;

std::vector<Flag> model_and_data_flags() {
  return {
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
      {"num-classes", FlagType::integer, "0", "classifier outputs; 0 = the dataset's class count", {}},
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
      {"init-weights", FlagType::string, "", "a .safetensors state dict with torchvision's keys to start from", {}},
      {"synthetic-size", FlagType::string, "1024x3x32x32",
       "synthetic dataset: NxCxHxW (with --dataset synthetic)", {}},
      {"threads", FlagType::integer, "0", "CPU threads for the math (0 = all cores)", {}},
      {"seed", FlagType::integer, "0", "seed of initialisation, data order, augmentation and synthetic data", {}},
  };
}

}  // namespace

std::vector<Flag> train_flags() {
  std::vector<Flag> f = model_and_data_flags();
  const std::vector<Flag> more = {
      {"epochs", FlagType::integer, "5", "passes over the training set", {}},
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
      {"augment", FlagType::boolean, "false", "random crop (padding 2 / 4) and horizontal flip for small images", {}},
      {"zero-init-residual", FlagType::boolean, "false", "zero the last batch-norm weight of every block", {}},
      {"output-dir", FlagType::string, "", "where checkpoints, weights and metrics go (default runs/<time>)", {}},
      {"resume", FlagType::string, "", "continue from this checkpoint (bit-exact on CPU)", {}},
      {"checkpoint-every", FlagType::integer, "0", "also checkpoint every N optimizer steps (0 = per epoch)", {}},
      {"print-freq", FlagType::integer, "50", "log every N optimizer steps", {}},
      {"skip-nonfinite", FlagType::boolean, "false", "skip steps whose loss is NaN/Inf instead of stopping", {}},
      {"cudnn-benchmark", FlagType::boolean, "false",
       "CUDA: time cuDNN's candidate algorithms per convolution shape and keep the fastest (ignored on the CPU)", {}},
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
