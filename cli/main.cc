// ringtape: the command-line entry point.
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <string>
#include <vector>

#include "cli/analyze.h"
#include "cli/doctor.h"
#include "cli/flags.h"
#include "cli/pack.h"
#include "cli/plot.h"
#include "cli/recipes.h"
#include "distributed/nccl_communicator.h"
#include "engine/device.h"
#include "base/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/runtime.h"
#include "cli/train_flags.h"
#include "cli/train_command.h"

namespace {

const char* kUsage =
    "usage: ringtape <command> [flags]\n\n"
    "commands:\n"
    "  train   train a model (with no flags: a small ResNet on Fashion-MNIST)\n"
    "  eval    evaluate weights or a checkpoint on a dataset's test split\n"
    "  info    the devices ringtape sees, its CPU threads and instruction set\n"
    "  doctor  can this machine train, on how many GPUs? (versions, links, ports, Gloo; exit 1 if not)\n"
    "  plot    draw runs' metrics.jsonl (loss, accuracy, learning rate, images/s) as an SVG\n"
    "  pack    write an image folder as WebDataset tar shards (for --dataset webdataset)\n"
    "  analyze where the ranks of a failed data-parallel run diverged (its flight records)\n"
    "  stacks  every thread's stack of a running process (e.g. a rank that seems stuck)\n\n"
    "`ringtape <command> --help` lists a command's flags with their defaults.";

int cmd_info() {
  std::printf("ringtape: C++ training engine for ResNet-class networks\n");
  std::printf("cpu: %d OpenMP threads, GEMM instruction set %s\n", omp_get_max_threads(), rt::cpu::gemm_isa());
  std::string why;
  const int n = rt::cuda::device_count(&why);
  std::printf("cuda: %s\n", rt::cuda::runtime_versions().c_str());
  std::printf("nccl: %s\n", rt::dist::nccl_versions().c_str());
  if (n == 0) std::printf("cuda: no usable device (%s)\n", why.c_str());
  for (int i = 0; i < n; ++i) {
    const rt::cuda::DeviceProps p = rt::cuda::device_props(i);
    std::printf("cuda:%d: %s, %.1f GiB, %d SMs, compute capability %d.%d\n", i, p.name.c_str(),
                double(p.total_bytes) / (1 << 30), p.sm_count, p.cc_major, p.cc_minor);
  }
  std::printf("default device: %s\n", rt::default_device().str().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Under `bazel run` the binary starts in its runfiles tree; relative paths (--data-path,
  // --output-dir, --resume) mean the user's directory, which Bazel passes here.
  if (const char* wd = std::getenv("BUILD_WORKING_DIRECTORY")) {
    if (::chdir(wd) != 0) std::fprintf(stderr, "ringtape: cannot change to %s; relative paths start in %s\n", wd,
                                       std::filesystem::current_path().c_str());
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fprintf(argc < 2 ? stderr : stdout, "%s\n", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  // Exit status: 2 for a bad command line (UsageError: flags, values, weights that do not
  // match the model, an --output-dir holding another run), 1 for a failure while running,
  // 128 + N when training stopped on signal N (train/interrupt.h).
  try {
    if (cmd == "info") return cmd_info();
    if (cmd == "doctor") return rt::cli::doctor_command(args);
    if (cmd == "plot") return rt::cli::plot_command(args);
    if (cmd == "pack") return rt::cli::pack_command(args);
    if (cmd == "analyze") return rt::cli::analyze_command(args);
    if (cmd == "stacks") return rt::cli::stacks_command(args);
    if (cmd == "train" || cmd == "eval") {
      rt::cli::Flags flags(cmd == "train" ? rt::cli::train_flags() : rt::cli::eval_flags());
      for (const auto& a : args)
        if (a == "--help" || a == "-h") {
          std::printf("%s\n", flags.help("usage: ringtape " + cmd + " [flags]").c_str());
          return 0;
        }
      std::string recipe;
      rt::cli::parse_with_recipe(flags, args, &recipe);
      if (!recipe.empty()) std::printf("%s\n", recipe.c_str());
      // The launcher's workers get the command line as given and expand the recipe themselves.
      return cmd == "train" ? rt::cli::run_train(flags, args) : rt::cli::run_eval(flags);
    }
  } catch (const rt::UsageError& e) {
    std::fprintf(stderr, "ringtape %s: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const rt::Error& e) {
    std::fprintf(stderr, "ringtape %s: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {  // from the standard library (a filesystem error, bad_alloc): still no abort
    std::fprintf(stderr, "ringtape %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "ringtape: unknown command '%s'\n\n%s\n", cmd.c_str(), kUsage);
  return 2;
}
