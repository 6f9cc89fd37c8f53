// ringtape: the command-line entry point.
#include <cstdio>
#include <cstring>
#include <string>

#include <omp.h>

#include "engine/device.h"
#include "engine/error.h"
#include "kernels/cuda/runtime.h"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: ringtape <command> [flags]\n\n"
               "commands:\n"
               "  info    the devices ringtape sees, its CPU threads and memory allocators\n");
}

int cmd_info() {
  std::printf("ringtape: C++ training engine for ResNet-class networks\n");
  std::printf("cpu: %d OpenMP threads\n", omp_get_max_threads());
  std::string why;
  const int n = rt::cuda::device_count(&why);
  std::printf("cuda: %s\n", rt::cuda::runtime_versions().c_str());
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
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "info") return cmd_info();
  } catch (const rt::Error& e) {
    std::fprintf(stderr, "ringtape %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "ringtape: unknown command '%s'\n\n", cmd.c_str());
  usage(stderr);
  return 2;
}
