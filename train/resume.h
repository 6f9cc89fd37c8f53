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
//
// Note [Settings before tensors]
// A checkpoint's tensors fit only a model of its architecture, which follows from settings:
// --model, --width, --small-stem and --stem-stride (auto: from --train-crop-size for the
// ImageNet pipeline, from the image size otherwise), --num-classes (0: the dataset's class
// count). Loading the tensors first reports the shapes that follow from a different setting
// (a hundred tensors "of another shape") instead of the setting. So the recorded flags are
// read from the checkpoint's header and compared first, every differing one named; then the
// architecture the trainer records beside them ("arch.*": what the data decided too, such as
// the class count of another --data-path); the tensors last.
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
// training stands. Flags named in `trajectory` (TrainConfig::trajectory_flags) whose recorded
// values differ from `flags` (this run's recorded flags, with the "arch.*" entries) are one
// UsageError naming each with both values, before any tensor is read
// (Note [Settings before tensors]); checkpoint errors are load_checkpoint's.
// `steps_per_epoch`: this run's (Note [Resume with another world size]); when the same number
// of processes has another count than the checkpoint records (another training set), one line
// says what that does to the schedule.
Progress resume(const std::string& path, nn::Module& model, optim::Optimizer& opt, MixedPrecision& mp,
                const std::map<std::string, std::string>& flags, const std::set<std::string>& trajectory,
                int64_t steps_per_epoch, optim::ModelEma* ema = nullptr);

}  // namespace rt::train
