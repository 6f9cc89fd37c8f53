// What NVTX's static injection hook saw (nvtx_injection.cc): the ranges pushed and popped.
#pragma once

#include <string>
#include <vector>

namespace rt::nvtx_test {

struct Seen {
  std::vector<std::string> pushed;  // every nvtxRangePushA's message, in order
  int pops = 0;
  int max_depth = 0, depth = 0;
  bool initialised = false;         // NVTX called the hook
};
Seen& seen();

}  // namespace rt::nvtx_test
