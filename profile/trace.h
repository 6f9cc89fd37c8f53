// A recorded profile as a timeline in the Chrome trace event format (JSON object form),
// which Perfetto and chrome://tracing open.
//
// Tracks: one process per rank for the host, with a track per host thread (main, the
// loader's workers, the communication thread: whatever named itself with
// prof::thread_id); one process per rank for the GPU with a track per CUDA stream, named
// by what runs on it (compute, communication: NCCL kernels, copies). Ops, layers, phases
// and steps are nested slices on the host tracks; kernels and copies are slices on the
// stream tracks, each linked to the op that launched it by a flow arrow; memory is a
// counter track per device (allocated and reserved MiB, sampled after each top-level op).
// Timestamps are microseconds from the first event.
#pragma once

#include <string>
#include <vector>

#include "engine/io/json.h"
#include "engine/profiler.h"

namespace rt::prof {

// The trace as a JSON value ({"traceEvents": [...], "displayTimeUnit": "ms"}).
json::Value trace_json(const std::vector<Event>& events, const std::vector<std::string>& thread_names, int rank);

// Writes trace_json to `path` atomically (a temporary file renamed into place).
void write_trace(const std::string& path, const std::vector<Event>& events,
                 const std::vector<std::string>& thread_names, int rank);

}  // namespace rt::prof
