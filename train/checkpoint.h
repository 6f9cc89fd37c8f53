// Training checkpoints: model state, optimizer state, and where training stands, in one
// safetensors file written atomically (temporary file, fsync, rename): an interrupted
// save never damages the previous checkpoint.
//
// Keys: "model.<torchvision state_dict key>", "optimizer.<optimizer state key>", and with
// fp16's loss scaling "grad_scaler.scale" and "grad_scaler.growth_tracker", with --model-ema
// "model_ema.<optim::ModelEma::state() key>" (torchvision's checkpoint["model_ema"] keys).
// Metadata: format, epoch, batch (next batch of that epoch), step (optimizer steps done),
// samples_seen, and the run's flags as JSON (to refuse resuming with different settings).
// The data order and augmentations are pure functions of (seed, epoch, index), so no
// random-generator state needs saving.
#pragma once

#include <map>
#include <string>

#include "engine/nn/module.h"
#include "optim/optimizer.h"

namespace rt::train {

struct Progress {
  int64_t epoch = 0;         // the epoch in progress (or the next one at an epoch boundary)
  int64_t batch = 0;         // next batch within that epoch
  int64_t step = 0;          // optimizer steps done
  int64_t samples_seen = 0;
};

// `scaler` is the loss scaler's state (MixedPrecision::state()), empty without one. A
// NaN/Inf anywhere is an rt::Error naming the tensor and the step, and nothing is written.
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt,
                     const Progress& progress, const std::map<std::string, std::string>& flags,
                     const std::map<std::string, Tensor>& scaler = {},
                     const std::map<std::string, Tensor>& ema = {});

// Restores model and optimizer in place; returns the progress and (via `flags`) the flags
// the checkpoint was written with, and via `scaler` (when given) the loss scaler's state
// (empty when it has none), for the caller to check and restore after the flags. Errors
// name the file and what is wrong with it; a file that is not a checkpoint, or whose model
// part does not match the model exactly, is a UsageError (a bad --resume).
Progress load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt,
                         std::map<std::string, std::string>* flags, std::map<std::string, Tensor>* scaler = nullptr,
                         std::map<std::string, Tensor>* ema = nullptr);

// The flags a checkpoint records (with the entries the trainer adds: the world size, the
// steps per epoch, the model's architecture), read from its header alone, so that they can be
// compared before any tensor is loaded (Note [Settings before tensors], train/resume.h).
// Empty when `path` is not a readable ringtape checkpoint (loading it then says why).
std::map<std::string, std::string> read_checkpoint_flags(const std::string& path);

// Only the model part of a checkpoint (for evaluation). A plain weights file is a
// UsageError pointing to --init-weights.
// ema: the EMA's weights instead (a UsageError when the checkpoint has none).
void load_checkpoint_model(const std::string& path, nn::Module& model, bool ema = false);

// The model's full state (every parameter and buffer, torchvision's keys): what
// --init-weights reads and what a user takes to PyTorch. Refuses NaN/Inf like save_checkpoint.
void save_weights(const std::string& path, const nn::Module& model);
// --init-weights: loads such a file (or any state dict with those keys, e.g. PyTorch's), or
// the model part of a ringtape checkpoint (saying so). strict: the keys and shapes must
// match the model exactly, else a UsageError lists every missing, unexpected and
// reshaped key. Non-strict (--init-weights-non-strict): loads what matches and prints what
// it skipped. Floating dtypes convert (printed once per dtype pair); floating <-> integer is
// a UsageError in both modes. Nothing is changed when it throws.
void load_weights(const std::string& path, nn::Module& model, bool strict = true);

}  // namespace rt::train
