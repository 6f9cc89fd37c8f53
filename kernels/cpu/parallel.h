// Loops over the CPU cores (OpenMP). Small loops stay on one thread: waking the team
// costs more than it saves below a few thousand elements.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rt::cpu {

inline constexpr int64_t kParallelGrain = 1 << 14;

// f(i) for i in [0, n), in parallel when n * cost_per_item is large enough.
template <typename F>
void parallel_for(int64_t n, F&& f, int64_t cost_per_item = 1) {
#pragma omp parallel for schedule(static) if (n * cost_per_item >= kParallelGrain && n > 1)
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace rt::cpu
