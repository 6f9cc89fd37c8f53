#include "profile/session.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "engine/memory_report.h"
#include "engine/stream.h"
#include "profile/cupti_tracer.h"
#include "profile/trace.h"

#if RINGTAPE_CUDA_EMU
#include "cuda_emu/emu.h"
#endif

namespace rt::prof {
namespace {

// Under --config=cuda-emu the kernel lab records the profiled steps only (Note [Kernel lab]
// in cuda_emu/perf.cc): a training command's --profile-steps is the step report's window.
void lab_window(bool open) {
#if RINGTAPE_CUDA_EMU
  rt::emu::perf_window(open);
#else
  (void)open;
#endif
}

int64_t parse_step(const std::string& s, const std::string& spec) {
  size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  RT_CHECK(used == s.size() && !s.empty() && v >= 1, "profiled steps must be A:B with 1 <= A < B (steps A..B-1, ",
           "1-based, like the log lines), got '", spec, "'");
  return int64_t(v);
}

std::string file_name(const char* stem, int rank, int world) {
  return world > 1 ? std::string(stem) + ".rank-" + std::to_string(rank) + ".json" : std::string(stem) + ".json";
}

}  // namespace

ProfileConfig parse_profile_steps(const std::string& spec, const std::string& group) {
  ProfileConfig c;
  c.group = parse_group(group);
  if (spec.empty()) return c;
  const size_t colon = spec.find(':');
  RT_CHECK(colon != std::string::npos, "profiled steps must be A:B (steps A..B-1, 1-based), got '", spec, "'");
  const int64_t a = parse_step(spec.substr(0, colon), spec), b = parse_step(spec.substr(colon + 1), spec);
  RT_CHECK(a < b, "profiled steps A:B need A < B (B is the first step not profiled), got '", spec, "'");
  c.first = a - 1;
  c.end = b - 1;
  return c;
}

ProfileSession::ProfileSession(const ProfileConfig& cfg, Device device, bool tf32, std::string out_dir, int rank,
                               int world)
    : cfg_(cfg), device_(device), tf32_(tf32), out_dir_(std::move(out_dir)), rank_(rank), world_(world) {
  // Profiled steps ahead: the lab's window starts closed, so that set-up and the steps
  // before them are not recorded.
  if (cfg_.enabled()) lab_window(false);
}

ProfileSession::~ProfileSession() {
  if (!recording_) return;
  lab_window(false);
  prof::stop();  // an exception left a profiled step: drop what was recorded
}

void ProfileSession::begin_step(int64_t step) {
  if (!cfg_.enabled() || done_ || recording_ || step < cfg_.first || step >= cfg_.end) return;
  if (device_.is_cuda()) {
    Stream::current(device_).synchronize();  // earlier steps' kernels stay out of the profile
    tracer_ = std::make_unique<CuptiTracer>();
  }
  recorded_first_ = recorded_end_ = step;
  thread_id("main");
  allocator_for(device_).reset_peak();
  prof::start(tracer_.get());
  lab_window(true);
  recording_ = true;
}

void ProfileSession::end_step(int64_t step) {
  if (!recording_) return;
  if (device_.is_cuda()) Stream::current(device_).synchronize();  // this step's kernels inside its range
  set_step(-1);
  recorded_end_ = step + 1;
  Allocator& mem = allocator_for(device_);
  memory_.push_back(mem.stats());
  mem.reset_peak();
  if (step + 1 >= cfg_.end) finish();
}

void ProfileSession::stop() {
  if (recording_) finish();
}

void ProfileSession::finish() {
  lab_window(false);
  std::vector<Event> events = prof::stop();
  recording_ = false;
  done_ = true;
  if (tracer_) {
    for (Event& e : tracer_->finish()) events.push_back(std::move(e));
    tracer_.reset();
  }
  // The peaks are measured on a first run on this device model (Note [Device peaks]).
  const DevicePeaks peaks = device_peaks(device_);
  profile_ = std::make_unique<Profile>(summarize(events, device_, peaks, tf32_, recorded_first_, recorded_end_));
  std::filesystem::create_directories(out_dir_);
  profile_path_ = out_dir_ + "/" + file_name("profile", rank_, world_);
  trace_path_ = out_dir_ + "/" + file_name("trace", rank_, world_);
  {
    const std::string tmp = profile_path_ + ".tmp";
    std::ofstream f(tmp);
    RT_CHECK(f, "cannot write the profile ", tmp);
    json::Value j = to_json(*profile_);
    json::Value mem = json::Value::array();
    for (const AllocatorStats& s : memory_) mem.push_back(memory_json(device_, s));
    j.set("memory", std::move(mem));
    f << json::dump(j) << "\n";
    RT_CHECK(f.good(), "writing the profile ", tmp, " failed (disk full?)");
    f.close();
    std::filesystem::rename(tmp, profile_path_);
  }
  write_trace(trace_path_, events, thread_names(), rank_);
  if (rank_ == 0) {
    std::fprintf(table_out_, "%s", format_table(*profile_, cfg_.group, cfg_.top).c_str());
    if (!memory_.empty())
      std::fprintf(table_out_, "  memory of the last profiled step: %s\n", memory_log_line(device_, memory_.back()).c_str());
    std::fprintf(table_out_, "profile: %s; timeline: %s (open it in Perfetto or chrome://tracing)\n",
                 profile_path_.c_str(), trace_path_.c_str());
    std::fflush(table_out_);
  }
}

}  // namespace rt::prof
