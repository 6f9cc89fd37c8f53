// Faults injected on purpose, to test what ringtape says when a job goes wrong (the flight
// recorder's analysis: Note [Where ranks diverge] in distributed/flight_analysis.h). Read once
// from the environment variable RINGTAPE_FAULT, for tests only:
//   skip-bucket:RANK:STEP:BUCKET      rank RANK, at training step STEP, does not issue
//                                     gradient bucket BUCKET's all-reduce (its later
//                                     collectives are then the others' next ones);
//   barrier-for-bucket:RANK:STEP:BUCKET  it issues a barrier instead (a different collective).
// Unset or empty: none. A malformed value is an error naming the accepted forms.
#pragma once

#include <cstdint>
#include <string>

namespace rt::dist {

struct Fault {
  enum class Kind { none, skip_bucket, barrier_for_bucket } kind = Kind::none;
  int rank = -1;
  int64_t step = -1;
  int bucket = -1;
};

// Parses `text` (RINGTAPE_FAULT's form); throws rt::Error naming the problem.
Fault parse_fault(const std::string& text);
// RINGTAPE_FAULT, parsed at the first call.
const Fault& injected_fault();

}  // namespace rt::dist
