// The ranks' flight records merged (Note [Flight recorder] in distributed/flight_recorder.h):
// for each communicator, the first collective where the ranks diverge, in words.
//
// Note [Where ranks diverge]
// Every rank issues the same collectives on a communicator in the same order, so the records
// of one communicator line up by sequence number. Walking the numbers every rank still holds
// (a ring forgets its oldest), the first number where
//   - the ranks issued different calls (operation, dtype, element count) is a disagreement:
//     named with each side, and, when the odd rank's call is the others' next one, as the
//     call it skipped;
//   - some ranks issued it and others did not is a rank that never entered it: named with
//     what it was for, since when the others wait in it, the absent rank's last completed
//     call, its step and what the launcher saw of its process (stopped, killed, exited);
//   - every rank issued it and some have not completed it is a call stuck inside (a peer
//     lost mid-call, a network that stopped): named with who completed and who waited.
// When nothing diverges, it says so: the failure is not in the collectives (the rank logs say
// more). Ranks without records are named as such.
#pragma once

#include <string>
#include <vector>

#include "distributed/flight_recorder.h"

namespace rt::dist::flight {

// What the records say, as lines of text (each ends with '\n'). `world`: the job's size (the
// ranks not among `ranks` are named as missing).
std::string analyze(const std::vector<RankRecords>& ranks, int world);

// Every <run_dir>/logs/flight-rank-K.json; a file that cannot be read is named in `problems`
// (the analysis goes on without it). Throws rt::Error when run_dir has no logs/ directory.
std::vector<RankRecords> read_run_dir(const std::string& run_dir, std::vector<std::string>& problems);

// Keeps the records of one run: a directory resumed after a failure may still hold an earlier
// run's files (another world size, or written long before the newest). Drops those of another
// world size than the newest file's, and those written more than `window_s` before it, each
// named in `problems`.
void keep_one_run(std::vector<RankRecords>& ranks, std::vector<std::string>& problems, double window_s = 600);

// "0-2, 5": a sorted rank list in ranges.
std::string rank_list(std::vector<int> ranks);

}  // namespace rt::dist::flight
