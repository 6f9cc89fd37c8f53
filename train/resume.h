// --resume: continuing a run from its checkpoint.
//
// Note [Exact resume]
// On the CPU every step is a deterministic function of the weights, the optimizer state and
// the batch (fixed OpenMP partitioning for a given thread count), and the batch is a pure
// function of (seed, epoch, batch index). A checkpoint therefore only records where
// training stands; resuming from it replays the same batches and reproduces the
// uninterrupted run bit for bit, also from the middle of an epoch.
//
// Note [Trajectory flags]
// The checkpoint records every flag as it was typed (TrainConfig::recorded_flags, with
// --precision as auto resolved it). The flags that shape the trajectory (model, data,
// batch, optimizer, schedule, seed, threads, precision, ...) must be the same when
// resuming, or the run would not continue the same training; the others (--steps,
// --print-freq, --checkpoint-every, --output-dir, --workers, --device, ...) may change.
#pragma once

#include <map>
#include <set>
#include <string>

#include "engine/nn/module.h"
#include "optim/ema.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/precision.h"

namespace rt::train {

// Restores model, optimizer, loss scaler (and `ema`, when given) from the checkpoint at `path` and returns where
// training stands. A flag named in `trajectory` (TrainConfig::trajectory_flags) whose
// recorded value differs from `flags` (this run's recorded flags) is a UsageError naming both
// values; checkpoint errors are load_checkpoint's.
// `steps_per_epoch`: this run's (Note [Resume with another world size]).
Progress resume(const std::string& path, nn::Module& model, optim::Optimizer& opt, MixedPrecision& mp,
                const std::map<std::string, std::string>& flags, const std::set<std::string>& trajectory,
                int64_t steps_per_epoch, optim::ModelEma* ema = nullptr);

}  // namespace rt::train
