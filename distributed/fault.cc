#include "distributed/fault.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#include "base/error.h"

namespace rt::dist {

Fault parse_fault(const std::string& text) {
  Fault f;
  if (text.empty()) return f;
  std::vector<std::string> parts;
  std::stringstream s(text);
  for (std::string p; std::getline(s, p, ':');) parts.push_back(p);
  const char* forms =
      "skip-bucket:RANK:STEP:BUCKET, barrier-for-bucket:RANK:STEP:BUCKET, kill:RANK:STEP or slow:RANK:PHASE:MS";
  RT_CHECK(!parts.empty(), "RINGTAPE_FAULT '", text, "': expected ", forms);
  size_t arity = 4;
  if (parts[0] == "skip-bucket")
    f.kind = Fault::Kind::skip_bucket;
  else if (parts[0] == "barrier-for-bucket")
    f.kind = Fault::Kind::barrier_for_bucket;
  else if (parts[0] == "kill")
    f.kind = Fault::Kind::kill, arity = 3;
  else if (parts[0] == "slow")
    f.kind = Fault::Kind::slow;
  else
    RT_FAIL("RINGTAPE_FAULT '", text, "': unknown fault '", parts[0], "'; expected ", forms);
  RT_CHECK(parts.size() == arity, "RINGTAPE_FAULT '", text, "': expected ", forms);
  auto number = [&](const std::string& v, const char* what) {
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    RT_CHECK(!v.empty() && *end == '\0' && n >= 0, "RINGTAPE_FAULT '", text, "': ", what,
             " must be an integer >= 0, got '", v, "'");
    return int64_t(n);
  };
  f.rank = int(number(parts[1], "RANK"));
  if (f.kind == Fault::Kind::slow) {
    f.phase = parts[2];
    RT_CHECK(f.phase == "data" || f.phase == "forward" || f.phase == "backward" || f.phase == "optimizer",
             "RINGTAPE_FAULT '", text, "': PHASE must be data, forward, backward or optimizer, got '", f.phase, "'");
    f.ms = number(parts[3], "MS");
    return f;
  }
  f.step = number(parts[2], "STEP");
  if (arity == 4) f.bucket = int(number(parts[3], "BUCKET"));
  return f;
}

const Fault& injected_fault() {
  static const Fault f = [] {
    const char* v = std::getenv("RINGTAPE_FAULT");
    return parse_fault(v ? v : "");
  }();
  return f;
}

int restart_round() {
  static const int round = [] {
    const char* v = std::getenv("RINGTAPE_RESTART_ROUND");
    return v ? std::atoi(v) : 0;
  }();
  return round;
}

void inject_step_fault(int rank, int64_t step) {
  const Fault& f = injected_fault();
  if (f.kind != Fault::Kind::kill || f.rank != rank || f.step != step || restart_round() > 0) return;
  std::fprintf(stderr, "RINGTAPE_FAULT: rank %d kills itself at step %ld\n", rank, long(step));
  std::fflush(stderr);
  raise(SIGKILL);
}

void inject_phase_delay(int rank, const char* phase) {
  const Fault& f = injected_fault();
  if (f.kind == Fault::Kind::slow && f.rank == rank && f.phase == phase)
    std::this_thread::sleep_for(std::chrono::milliseconds(f.ms));
}

}  // namespace rt::dist
