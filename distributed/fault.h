// Faults injected on purpose, to test what ringtape says when a job goes wrong (the flight
// recorder's analysis: Note [Where ranks diverge] in distributed/flight_analysis.h). Read once
// from the environment variable RINGTAPE_FAULT, for tests only:
//   skip-bucket:RANK:STEP:BUCKET      rank RANK, at training step STEP, does not issue
//                                     gradient bucket BUCKET's all-reduce (its later
//                                     collectives are then the others' next ones);
//   barrier-for-bucket:RANK:STEP:BUCKET  it issues a barrier instead (a different collective);
//   kill:RANK:STEP                    rank RANK kills itself (SIGKILL) as training step STEP
//                                     begins, in the launcher's first round only (a restarted
//                                     run, RINGTAPE_RESTART_ROUND > 0, goes on:
//                                     Note [Elastic restarts] in distributed/local_launcher.cc);
//   slow:RANK:PHASE:MS                rank RANK sleeps MS milliseconds in every step's PHASE
//                                     (data, forward, backward, optimizer: Note [Stragglers] in
//                                     train/straggler.h).
// Unset or empty: none. A malformed value is an error naming the accepted forms.
#pragma once

#include <cstdint>
#include <string>

namespace rt::dist {

struct Fault {
  enum class Kind { none, skip_bucket, barrier_for_bucket, kill, slow } kind = Kind::none;
  int rank = -1;
  int64_t step = -1;
  int bucket = -1;
  std::string phase;  // slow
  int64_t ms = 0;     // slow
};

// Parses `text` (RINGTAPE_FAULT's form); throws rt::Error naming the problem.
Fault parse_fault(const std::string& text);
// RINGTAPE_FAULT, parsed at the first call.
const Fault& injected_fault();

// The launcher's restart round of this process (RINGTAPE_RESTART_ROUND; 0 when unset).
int restart_round();
// At the start of training step `step` on `rank`: RINGTAPE_FAULT's kill, if it is this one's.
void inject_step_fault(int rank, int64_t step);
// At the start of phase `phase` on `rank`: RINGTAPE_FAULT's slow sleep, if it is this one's.
void inject_phase_delay(int rank, const char* phase);

}  // namespace rt::dist
