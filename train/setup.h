// Set-up: from a configuration to the objects a run works with. The model, datasets, device
// and precision are shared by `ringtape train` and `ringtape eval`; the optimizer and the
// training data feed are training's. Resuming is in train/resume.h.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "data/datasets/dataset.h"
#include "data/loading/device_feeder.h"
#include "data/loading/loader.h"
#include "engine/nn/module.h"
#include "models/registry.h"
#include "optim/optimizer.h"
#include "train/parallel_context.h"
#include "train/precision.h"
#include "train/train_config.h"

namespace rt::train {

struct Setup {
  std::unique_ptr<data::Dataset> train_set;  // training only
  std::unique_ptr<data::Dataset> test_set;
  std::shared_ptr<nn::Module> model;  // on the CPU, initialised (from the seed when training)
  Device device;
  Precision precision = Precision::fp32;
  MemoryFormat format = MemoryFormat::channels_last;
  models::ModelOptions model_options;  // what built `model`
};

// The datasets' options from the configuration (what data::open_dataset takes).
data::DatasetOptions dataset_options(const CommonConfig& cfg);

// Sets the CPU thread count, resolves the device and precision (printing what auto chose),
// opens the datasets (the training set only when `training`), checks their labels against
// the model's classes, and builds the model, whose architecture follows the training image
// size. Prints one line describing the model.
Setup set_up(const CommonConfig& cfg, bool training);

// A second model of the same architecture (the EMA's), on the device, in the format.
std::shared_ptr<nn::Module> make_model_like(const CommonConfig& cfg, const Setup& s);

// The model's architecture as a checkpoint records it beside the flags ("arch.*" entries):
// what the shapes of its tensors follow from (Note [Settings before tensors], train/resume.h).
std::map<std::string, std::string> architecture_record(const std::string& model, const models::ModelOptions& mo);
// What differs between two architecture records ("" when they agree or `then` has none), e.g.
// "the small stem: on in the checkpoint, off here; width: 16 in the checkpoint, 64 here".
std::string architecture_difference(const std::map<std::string, std::string>& then,
                                    const std::map<std::string, std::string>& now);
// Before the weights of the checkpoint at `path` are loaded into `s.model` (eval, --test-only):
// a checkpoint whose recorded architecture differs is a UsageError naming what differs and the
// flags that give the checkpoint's model (--train-crop-size when the stem and width follow it).
void check_checkpoint_fits(const std::string& path, const CommonConfig& cfg, const Setup& s);

// --init-weights into `model`, when given.
void load_init_weights(const CommonConfig& cfg, nn::Module& model);

data::LoaderOptions loader_options(const LoaderConfig& cfg, Device device);
// The optimizer of --optimizer over the model's parameters, with the weight-decay groups of
// --norm-weight-decay and --bias-weight-decay.
std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerConfig& cfg, nn::Module& model);

// The training batches: this process's shard of each epoch (`par`), full batches only
// (batch-norm statistics, Note [Exact resume]), on the device in the input dtype.
struct TrainData {
  std::unique_ptr<data::Loader> loader;
  std::unique_ptr<data::DeviceFeeder> feed;
  int64_t batches_per_epoch = 0;
  int64_t steps_per_epoch = 0;  // batches per epoch / --accum-steps
};
// A training set smaller than one optimizer step is a UsageError.
TrainData open_train_data(const TrainConfig& cfg, const Setup& s, DType input_dtype, const ParallelContext& par);

}  // namespace rt::train
