// The configuration of `ringtape train` and `ringtape eval`, typed. The flags are parsed and
// checked once, by the command line (cli/train_flags.h: parse_train_config, parse_eval_config);
// nothing after that looks a flag up by its name. Every field's default is its flag's default: the
// flag's row takes it from here (Note [Defaults from the config], cli/train_flags.cc); "auto" and
// "none" are nullopt, 0 or "", as each field says.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "data/transforms/auto_augment.h"
#include "data/transforms/image_transforms.h"
#include "distributed/communicator_ops.h"
#include "distributed/reducer.h"
#include "engine/device.h"
#include "engine/tensor.h"
#include "optim/ema.h"
#include "optim/schedule.h"
#include "profile/session.h"
#include "train/precision.h"

namespace rt::train {

enum class OptimizerKind : uint8_t { sgd, adamw, lars };

struct ModelConfig {
  std::string name = "resnet18";  // a models/registry.h name (the registry is the closed set)
  int64_t width = 0;              // channels of the first stage; 0 = auto: 64 for images over 64 px, else 16
  std::optional<bool> small_stem;  // nullopt = auto: on for images of 64 px or less
  int stem_stride = 0;            // the small stem's stride; 0 = auto: 2 for images of 28 px or less, else 1
  int64_t num_classes = 0;        // classifier outputs; 0 = the dataset's class count
  MemoryFormat memory_format = MemoryFormat::channels_last;  // what --memory-format auto means
  bool zero_init_residual = false;  // training only

  bool operator==(const ModelConfig&) const = default;
};

struct DataConfig {
  std::string dataset = "fashion-mnist";  // a data/datasets/dataset_registry.h name (the registry is the closed set)
  std::string data_path;  // "" = the dataset's default location
  std::string val_data_path;      // webdataset: the evaluation shards ("" = beside the training ones)
  int64_t shuffle_buffer = 5000;  // webdataset: Note [Shard order]'s buffer, in examples
  std::array<int64_t, 4> synthetic_size = {1024, 3, 32, 32};  // N, C, H, W of --dataset synthetic
  int64_t train_crop_size = 224;  // imagenet: RandomResizedCrop output
  int64_t val_resize_size = 256;  // imagenet: evaluation resizes the shorter side to this
  int64_t val_crop_size = 224;    // imagenet: then centre-crops this square
  std::string cache_dir;          // "" = $RINGTAPE_CACHE_DIR, $XDG_CACHE_HOME/ringtape or ~/.cache/ringtape
  // imagenet, webdataset: an image whose header claims more pixels is refused before it is
  // decoded (Note [Decoded-pixel limit], data/datasets/dataset.h); 0 = no limit. PIL's default.
  int64_t max_image_pixels = 178956970;
  bool augment = true;            // training only: random crop and flip of small images
  data::Interpolation interpolation = data::Interpolation::bilinear;  // imagenet's crop and resize
  // Training only, the imagenet pipeline: the policy after the crop and flip (its
  // interpolation is --interpolation too).
  data::AutoAugmentOptions auto_augment;
  int ra_repetitions = 0;         // --ra-sampler: --ra-reps (Note [Repeated augmentation]); 0 = off
  // On the batch, on the training device (data/transforms/batch_augment.h): RandomErasing's p, and
  // the Beta parameters of mixup and cutmix (0 = off; both: one of the two per batch).
  double random_erase = 0;
  double mixup_alpha = 0;
  double cutmix_alpha = 0;

  bool operator==(const DataConfig&) const = default;
};

struct LoaderConfig {
  int64_t batch_size = 128;  // images per step, per process
  int workers = 2;           // loading threads; 0 = load in the training thread
  bool strict_images = false;  // an unreadable image is an error instead of skipped and counted

  bool operator==(const LoaderConfig&) const = default;
};

// Where the math runs and in what.
struct ComputeConfig {
  std::optional<Device> device;        // nullopt = auto: cuda:0 when a GPU is present, else the CPU
  std::optional<Precision> precision;  // nullopt = auto: bf16 on a GPU of compute capability 8.0+, else fp32
  int threads = 0;                     // CPU threads for the math; 0 = all cores
  bool cudnn_benchmark = false;        // training only, like the next one
  bool cudnn_benchmark_runtime_compiled = false;
  bool cuda_graphs = false;  // training only (Note [The training step as a CUDA graph], train/step.cc)

  bool operator==(const ComputeConfig&) const = default;
};

// What `ringtape train` and `ringtape eval` share.
struct CommonConfig {
  ModelConfig model;
  DataConfig data;
  LoaderConfig loader;
  ComputeConfig compute;
  std::string init_weights;        // "" = none (training: initialise from the seed)
  bool init_weights_strict = true;  // false: --init-weights-non-strict
  double label_smoothing = 0;      // of the training loss, and of the loss evaluation reports
  uint64_t seed = 0;               // initialisation, data order, augmentation, synthetic data
  prof::ProfileConfig profile;     // --profile-steps, --profile-group (profile/session.h)
  std::string profile_dir;         // "" = train: the output directory; eval: the current directory

  bool operator==(const CommonConfig&) const = default;
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::sgd;
  double lr = 0.1;  // the peak learning rate (the schedule's base)
  double momentum = 0.9;  // SGD
  bool nesterov = false;  // SGD
  double weight_decay = 5e-4;  // SGD: L2 added to the gradient; AdamW: decoupled
  bool no_bn_bias_decay = false;  // no weight decay for 1-D parameters
  // torchvision's set_weight_decay: the decay of batch-norm parameters and of parameters
  // named "bias" (which wins for a norm layer's bias); nullopt = weight_decay.
  std::optional<double> norm_weight_decay;
  std::optional<double> bias_weight_decay;
  double lars_eta = 0.001;           // LARS's trust coefficient
  bool lars_exclude_bn_bias = true;  // LARS: no trust ratio nor decay for 1-D parameters (MLPerf)
  double clip_grad_norm = 0;         // the gradients' total 2-norm is clipped to this; 0 = off

  bool operator==(const OptimizerConfig&) const = default;
};

// How long training runs and what a step is.
struct LoopConfig {
  int64_t epochs = 15;
  int64_t max_steps = 0;    // --steps: optimizer steps in total; 0 = epochs x steps per epoch
  int64_t accum_steps = 1;  // micro-batches per optimizer step
  bool shuffle = true;      // false: --no-shuffle
  bool skip_nonfinite = false;  // Note [Non-finite steps]
  bool test_only = false;       // evaluate the weights (and the EMA's) and stop, as torchvision's --test-only

  bool operator==(const LoopConfig&) const = default;
};

struct OutputConfig {
  std::string output_dir;  // "" = the --resume checkpoint's directory, else runs/<dataset>-<model>-<time>
  std::string resume;      // a checkpoint to continue from; "" = a new run
  int64_t checkpoint_every = 0;  // also checkpoint every N optimizer steps; 0 = once per epoch
  int64_t print_freq = 50;       // a log line every N optimizer steps
  bool progress_bar = true;      // false: --no-progress (drawn only on a terminal, train/progress_bar.h)
  bool tensorboard = false;      // TensorBoard scalars (train/tensorboard.h)
  std::string tensorboard_dir;   // "" = <output-dir>/tensorboard

  bool operator==(const OutputConfig&) const = default;
};

// --lr-scheduler cosine, and --lr-milestones' 30,60,80 (read only with the multistep
// schedule: another schedule keeps these and ignores them). LrScheduleOptions' other defaults
// are the flags' too.
inline optim::LrScheduleOptions default_lr_schedule() {
  optim::LrScheduleOptions o;
  o.kind = optim::LrScheduleKind::cosine;
  o.milestones = {30, 60, 80};
  return o;
}

// Data parallelism (train/data_parallel.h): the launcher's flags and the reducer's.
struct ParallelConfig {
  int nproc_per_node = 1;             // workers this command starts on this machine (1 = none: run here)
  int nnodes = 1;                     // machines taking part
  int node_rank = 0;                  // this machine's index among them
  std::string master_addr = "127.0.0.1";  // where rank 0 hosts the rendezvous store
  int master_port = 0;                // 0 = a free port (one machine only)
  int max_restarts = 0;               // the launcher restarts a failed job this often (Note [Elastic restarts])
  double rdzv_timeout_s = 600;        // how long nodes' launchers wait for each other in a round
  dist::AllReduceAlgo allreduce = dist::AllReduceAlgo::library;
  // The gradient buckets' size in MiB: the reducer's (its first bucket is smaller).
  double bucket_cap_mb = double(dist::ReducerOptions{}.bucket_bytes) / double(1 << 20);
  bool find_unused_parameters = false;
  double timeout_s = 300;             // every collective and the rendezvous
  bool comm_timeline = false;         // rank 0 writes each step's bucket timeline to <output-dir>/timeline.jsonl
  bool sync_bn = false;               // batch-norm statistics over every rank's batch (distributed/sync_batch_norm.h)
  DType grad_reduce_dtype = DType::f32;  // what the gradient all-reduce carries (Note [Reduce dtype])
  int64_t trace_buffer = 2000;        // collectives the flight recorder keeps (Note [Flight recorder]); 0: off
  double straggler_threshold = 0.2;   // a rank this much busier than the median is slow (Note [Stragglers])

  bool operator==(const ParallelConfig&) const = default;
};

// torchvision's --model-ema: an exponential moving average of the weights and batch-norm
// statistics (optim/ema.h), evaluated next to the model and saved as model_ema.safetensors.
struct EmaConfig {
  bool enabled = false;
  int64_t steps = 32;       // iterations between updates
  double decay = optim::kModelEmaDecay;  // per image, before torchvision's adjustment (optim::ema_decay_for)

  bool operator==(const EmaConfig&) const = default;
};

struct TrainConfig : CommonConfig {
  OptimizerConfig optimizer;
  EmaConfig ema;
  optim::LrScheduleOptions lr_schedule = default_lr_schedule();
  LoopConfig loop;
  OutputConfig output;
  ParallelConfig parallel;
  // Every flag's value as given or defaulted, as typed: the checkpoint records it. Which of
  // them --resume compares (Note [Trajectory flags]) and which every rank must share
  // (Note [Same flags on every rank]) the command line's rows say (Note [One row per flag]).
  std::map<std::string, std::string> recorded_flags;
  std::set<std::string> trajectory_flags;
  std::set<std::string> same_on_every_rank_flags;

  bool operator==(const TrainConfig&) const = default;
};

struct EvalConfig : CommonConfig {
  std::string checkpoint;  // the weights: this checkpoint's model part; "" = init_weights

  bool operator==(const EvalConfig&) const = default;
};

}  // namespace rt::train
