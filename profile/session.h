// `--profile-steps A:B`: records steps A..B-1 (1-based, like the log lines) of a training or
// evaluation loop, then prints the profile table and writes profile.json and trace.json
// (Chrome trace) to the output directory; the loop goes on unprofiled. Before step A and
// after step B-1 nothing is recorded: the scopes cost one atomic load each
// (Note [Profiler scopes] in engine/profiler.h).
//
// The loop brackets each step:
//   session.begin_step(i);                    // i: 0-based
//   { prof::RangeScope s(prof::EventKind::step, ...); ... }
//   session.end_step(i);
// On a GPU, end_step of a profiled step waits for the device, so each step's kernels fall
// inside its host range (that wait happens only in profiled steps), and CUPTI's records
// are collected once at the end (profile/cupti_tracer.h).
//
// Memory: each profiled step starts with the device allocator's peaks reset (so an epoch's
// memory line then covers the epoch from the profiled steps on), and ends with its stats:
// peak allocated and reserved bytes and what filled memory at the peak, by tag
// (engine/memory_tag.h), printed under the table and in profile.json ("memory").
//
// Files: profile.json and trace.json; in a data-parallel run every rank writes
// profile.rank-K.json and trace.rank-K.json, and rank 0 prints the table.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "profile/report.h"

namespace rt::prof {

class CuptiTracer;

struct ProfileConfig {
  int64_t first = 0, end = 0;  // 0-based steps [first, end); end == 0: off
  Group group = Group::op;     // --profile-group
  int top = 30;                // table rows
  bool enabled() const { return end > first; }
  bool operator==(const ProfileConfig&) const = default;
};

// "A:B" (1 <= A < B) -> steps [A-1, B-1); "" -> off. Errors name the flag and the form.
ProfileConfig parse_profile_steps(const std::string& spec, const std::string& group = "op");

class ProfileSession {
 public:
  // `rank`, `world`: the data-parallel rank and world size (1: one process).
  ProfileSession(const ProfileConfig& cfg, Device device, bool tf32, std::string out_dir, int rank = 0,
                 int world = 1);
  ~ProfileSession();
  ProfileSession(const ProfileSession&) = delete;
  ProfileSession& operator=(const ProfileSession&) = delete;

  void begin_step(int64_t step);
  void end_step(int64_t step);
  // The loop ended inside the profiled steps: report what was recorded (a no-op otherwise).
  void stop();
  bool recording() const { return recording_; }
  // Where rank 0 prints the table (stdout unless changed).
  void set_table_stream(FILE* f) { table_out_ = f; }
  bool done() const { return done_; }
  // The profile, once the last profiled step ended (for tests and benchmarks).
  const Profile* profile() const { return profile_ ? profile_.get() : nullptr; }
  // Where the files went ("" before).
  const std::string& profile_path() const { return profile_path_; }
  const std::string& trace_path() const { return trace_path_; }

 private:
  void finish();

  ProfileConfig cfg_;
  Device device_;
  bool tf32_;
  std::string out_dir_;
  int rank_, world_;
  bool recording_ = false, done_ = false;
  int64_t recorded_first_ = 0, recorded_end_ = 0;  // the steps begun and ended while recording
  std::unique_ptr<CuptiTracer> tracer_;
  std::unique_ptr<Profile> profile_;
  std::vector<AllocatorStats> memory_;  // per profiled step
  std::string profile_path_, trace_path_;
  FILE* table_out_ = stdout;
};

}  // namespace rt::prof
