// What the profiler's scopes cost when no profile is being recorded (Note [Profiler scopes]
// in engine/profiler.h): nanoseconds per op, layer and phase scope, opened and closed 10
// million times in a loop (an NVTX push/pop with no tool attached, an atomic load; the
// layer scope also looks its module up), and, for scale, per recorded scope while a profile
// is on. Multiply by the scopes of a training step (the profiled table's calls) to get the
// cost per step: bench/RESULTS.md "Profiler".
#include <chrono>
#include <cstdio>
#include <string>

#include "engine/profiler.h"

namespace {

template <typename F>
double ns_per(int64_t n, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / double(n);
}

}  // namespace

int main() {
  using namespace rt::prof;
  const int64_t n = 10'000'000;
  int module_object = 0;
  register_module(&module_object, "layer3.1.conv2");
  const std::string phase = "forward";
  const double op_off = ns_per(n, [] { RT_PROFILE_OP("conv2d", OpCost{}, nullptr); });
  const double module_off = ns_per(n, [&] { const ModuleScope s(&module_object); });
  const double range_off = ns_per(n, [&] { const RangeScope s(EventKind::phase, phase); });
  // Recording: profiles of 5,000 op scopes each (a few training steps' worth), 100 times.
  double op_on = 0;
  size_t events = 0;
  for (int r = 0; r < 100; ++r) {
    start();
    op_on += ns_per(5000, [] { RT_PROFILE_OP("conv2d", OpCost{}, nullptr); }) / 100;
    events += stop().size();
  }
  std::printf("{\"op_scope_off_ns\": %.2f, \"module_scope_off_ns\": %.2f, \"phase_scope_off_ns\": %.2f, "
              "\"op_scope_recording_ns\": %.1f, \"events_recorded\": %zu}\n",
              op_off, module_off, range_off, op_on, events);
  return 0;
}
