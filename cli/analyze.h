// `ringtape analyze RUN_DIR`: the ranks' flight records of a data-parallel run
// (<RUN_DIR>/logs/flight-rank-K.json, Note [Flight recorder] in distributed/flight_recorder.h)
// merged: for each communicator, the first collective where the ranks diverge
// (Note [Where ranks diverge] in distributed/flight_analysis.h). The launcher prints the same
// when a rank fails; this prints it afterwards, from the files.
#pragma once

#include <string>
#include <vector>

namespace rt::cli {

// Prints the analysis; returns 0, or 1 when the run directory holds no flight record. Throws
// UsageError on a bad command line or a directory that is not a data-parallel run's.
int analyze_command(const std::vector<std::string>& args);

// `ringtape stacks PID`: the threads' stacks of a running process, symbolised (function,
// file:line; distributed/stack_dump.h), e.g. of a rank that seems stuck. The process must be
// one this user may trace. A rank runs it on itself when a peer asks
// (Note [Stacks of a rank without ringtape's launcher] in distributed/stack_dump.h). Returns 0,
// or 1 when the stacks could not be read (why, on stderr).
int stacks_command(const std::vector<std::string>& args);

}  // namespace rt::cli
