// Loops over the CPU cores (OpenMP). Small loops stay on one thread: waking the team
// costs more than it saves below a few thousand elements.
#pragma once

#include <cstddef>
#include <omp.h>

#include <cstdint>

namespace rt::cpu {

inline constexpr int64_t kParallelGrain = 1 << 14;

// f(i) for i in [0, n), in parallel when n * cost_per_item is large enough.
template <typename F>
void parallel_for(int64_t n, F&& f, int64_t cost_per_item = 1) {
#pragma omp parallel for schedule(static) if (n * cost_per_item >= kParallelGrain && n > 1)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// f(begin, end) over [0, n) split into one contiguous range per thread. Kernels run their
// loops over plain pointer arguments inside f: a loop that reads its pointers through a
// lambda's captures must reload them after every store (they might alias), which stops
// vectorisation.
template <typename F>
void parallel_range(int64_t n, F&& f, int64_t cost_per_item = 1) {
  if (n * cost_per_item < kParallelGrain || n < 2) {
    f(int64_t(0), n);
    return;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t b = n * t / nt, e = n * (t + 1) / nt;
    if (b < e) f(b, e);
  }
}

}  // namespace rt::cpu
