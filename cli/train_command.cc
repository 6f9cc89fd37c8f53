// `ringtape train` and `ringtape eval` from the command line (cli/train_command.h).
#include "cli/train_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/usage_error.h"
#include "cli/train_flags.h"
#include "distributed/launch_env.h"
#include "distributed/local_launcher.h"
#include "kernels/cuda/runtime.h"
#include "train/data_parallel.h"
#include "train/parallel_context.h"
#include "train/rank_log.h"
#include "train/trainer.h"

namespace rt::cli {

namespace fs = std::filesystem;

namespace {

std::string self_executable() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  RT_CHECK(!ec, "cannot find this program's path (/proc/self/exe): ", ec.message());
  return p.string();
}

// --nproc-per-node N: this process is the launcher; the workers run this program's `train`
// with the same flags but the launcher's.
int launch_workers(const train::ParallelConfig& pc, const std::vector<std::string>& args) {
  dist::LocalLaunchOptions o;
  o.nproc_per_node = pc.nproc_per_node;
  o.nnodes = pc.nnodes;
  o.node_rank = pc.node_rank;
  o.master_addr = pc.master_addr;
  o.master_port = pc.master_port;
  o.max_restarts = pc.max_restarts;
  o.rdzv_timeout = std::chrono::seconds(int64_t(std::ceil(pc.rdzv_timeout_s)));
  o.command = {self_executable(), "train"};
  const std::vector<std::string> worker_args = without_flags(train_flags(), kLauncher, args);
  for (const std::string& a : worker_args) o.command.push_back(a);
  // A restarted round (Note [Elastic restarts] in distributed/local_launcher.cc): the same
  // flags in the run's directory, resumed from its checkpoint.
  std::vector<Flag> placed;
  for (Flag f : train_flags())
    if (f.name == "resume" || f.name == "output-dir") {
      f.roles = kLauncher;
      placed.push_back(f);
    }
  o.restart_command = [command = o.command, placed, worker_args](const std::string& run_dir,
                                                                  const std::string& checkpoint) {
    if (run_dir.empty()) return command;  // the workers never got as far as their directory
    std::vector<std::string> c = {command[0], "train"};
    for (const std::string& a : without_flags(placed, kLauncher, worker_args)) c.push_back(a);
    c.insert(c.end(), {"--output-dir", run_dir});
    if (!checkpoint.empty()) c.insert(c.end(), {"--resume", checkpoint});
    return c;
  };
  return dist::run_local_launcher(o);
}

}  // namespace

// This rank's GPU: cuda:LOCAL_RANK; with fewer visible devices than local ranks (a scheduler
// binding each task to its own GPU, e.g. srun --gpus-per-task=1, leaves one visible to each
// process) LOCAL_RANK modulo the visible count, said in the log.
static int rank_gpu(const dist::LaunchEnv& env) {
  const int visible = cuda::device_count();
  if (visible <= 0 || env.local_rank < visible) return env.local_rank;
  const int gpu = env.local_rank % visible;
  std::fprintf(stderr,
               "rank %d: %d CUDA device%s visible to this process for %d local ranks (a per-task GPU binding?): "
               "local rank %d uses cuda:%d\n",
               env.rank, visible, visible == 1 ? "" : "s", env.local_world_size, env.local_rank, gpu);
  return gpu;
}

int run_train(const Flags& flags, const std::vector<std::string>& args) {
  train::TrainConfig cfg = parse_train_config(flags);
  // Refused before any worker starts (status 2), and in one process too, where it would be
  // silently ignored: Gloo reduces f32/f64 only (Note [Reduce dtype], distributed/reducer.h).
  if (cfg.parallel.grad_reduce_dtype == DType::bf16 &&
      !(cfg.compute.device ? *cfg.compute.device : default_device()).is_cuda())
    throw UsageError("--grad-reduce-dtype bf16 needs GPUs (NCCL); on the CPU gradients are reduced in fp32: drop "
                     "the flag");
  const dist::LaunchEnv env = dist::launch_env_from_process();
  const train::ParallelConfig& pc = cfg.parallel;
  if (pc.nproc_per_node > 1 || pc.nnodes > 1 || pc.max_restarts > 0) {  // one process restarted: a launcher too
    // Note [Who starts the ranks]
    // --nproc-per-node/--nnodes make this process the launcher. A process that another
    // launcher already made one rank of several (torchrun's RANK and WORLD_SIZE; srun's
    // SLURM_PROCID and SLURM_NTASKS, also set in an sbatch script) would otherwise ignore
    // the flags and wait out --timeout for ranks nobody starts.
    if (env.source != "default" && env.world_size > 1)
      throw UsageError(
          "--nproc-per-node " + std::to_string(pc.nproc_per_node) + " / --nnodes " + std::to_string(pc.nnodes) +
          (pc.max_restarts > 0 ? " / --max-restarts " + std::to_string(pc.max_restarts) : std::string()) +
          " make ringtape start the ranks, but this process already is " + env.describe() +
          ": the launcher that set " +
          (env.source == "slurm" ? "SLURM_PROCID and SLURM_NTASKS (srun, or an sbatch script)" : "RANK and WORLD_SIZE") +
          " starts the ranks. Drop --nproc-per-node, --nnodes and --max-restarts, or unset those variables to let "
          "ringtape launch");
    if (env.source != "default")
      std::printf("%s describes one process: --nproc-per-node %d starts the ranks\n", env.describe().c_str(),
                  pc.nproc_per_node);
    return launch_workers(pc, args);
  }
  // Note [World 1 under a launcher]
  // A process that torchrun (or a script with its variables) started as rank 0 of 1 trains data
  // parallel, as PyTorch's DDP does: the reducer, SyncBN and the NCCL or Gloo path all run, on
  // one GPU (the GPU check compares it with one process). Without a launcher (and under Slurm
  // with one task) one process trains alone.
  if (env.world_size == 1 && env.source != "torchrun") {
    train::SingleProcess one;
    return train::train(cfg, one);
  }
  // A worker of a data-parallel run (started by the launcher, torchrun or srun): on a GPU
  // machine its GPU is cuda:LOCAL_RANK; on the CPU the cores are shared among the node's ranks.
  Device device = cfg.compute.device ? *cfg.compute.device : default_device();
  if (device.is_cuda()) device = Device::cuda(rank_gpu(env));
  cfg.compute.device = device;
  // Every thread of this rank that touches CUDA without naming a device (the loader's
  // pinned buffers, the communicator's watchdog) works on this rank's GPU.
  if (device.is_cuda()) cuda::set_home_device(device.index);
  if (!device.is_cuda() && cfg.compute.threads == 0)
    cfg.compute.threads = std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, env.local_world_size));
  // Kept to the end of the process: main() prints a fatal error after the run
  // unwound (Note [Whole rank logs]).
  static std::optional<train::RankLog> log;
  log.emplace();
  train::DataParallel par(env, device, cfg.parallel);
  return train::train(cfg, par, &*log);
}

int run_eval(const Flags& flags) { return train::eval(parse_eval_config(flags)); }

}  // namespace rt::cli
