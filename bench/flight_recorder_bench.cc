// The flight recorder's cost per collective (Note [Flight recorder] in
// distributed/flight_recorder.h): what a communicator call adds to record itself (queued,
// started, ended), against the same calls with the recorder off, in the same run.
//   bazel run -c opt //bench:flight_recorder_bench -- [--calls N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "distributed/flight_recorder.h"

namespace {

namespace flight = rt::dist::flight;

// ns per collective over `calls` records (each: queued, started, ended, as a call makes them).
double per_call_ns(long calls) {
  const std::string what = "all_reduce #12 (library, avg, f32 x 6553600)";
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) {
    const flight::Purpose p("gradients", int(i % 5));
    const uint64_t id =
        flight::queued("main", "control", uint64_t(i), "all_reduce", 6553600, 26214400, "f32", "library", what);
    flight::started(id);
    flight::ended(id, true);
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / double(calls);
}

}  // namespace

int main(int argc, char** argv) {
  long calls = 200000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--calls") calls = std::atol(argv[i + 1]);
  if (calls <= 0) {
    std::fprintf(stderr, "--calls must be > 0\n");
    return 2;
  }
  const std::string dir = (std::filesystem::temp_directory_path() / "flight_recorder_bench").string();
  std::filesystem::create_directories(dir);
  setenv("RINGTAPE_FLIGHT_DIR", dir.c_str(), 1);  // the mapped ring, as under the launcher
  const double off = per_call_ns(calls);
  flight::configure(0, 1, 2000);
  per_call_ns(calls / 10);  // warm
  const double on = per_call_ns(calls);
  std::printf(
      "flight recorder, %ld collectives: %.0f ns per collective recorded (off: %.1f ns); a ResNet50 step "
      "of data parallelism issues ~5 bucket all-reduces (25 MiB buckets), ~%.1f us per step\n",
      calls, on, off, 5 * on / 1000.0);
  std::filesystem::remove_all(dir);
  return 0;
}
