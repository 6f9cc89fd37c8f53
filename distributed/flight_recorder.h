// The collective flight recorder: every rank keeps its last N collectives, so that when a job
// hangs or a rank fails, the ranks' records say which rank stopped, in which collective, and
// where the ranks disagree (distributed/flight_analysis.h reads them).
//
// Note [Flight recorder]
// Every collective a Communicator issues (not its point-to-point calls) takes one slot of a
// ring of `capacity` slots (--trace-buffer, 0: off): the communicator's name and the call's
// sequence number (#N in its messages, the same on every rank for the same call), operation,
// element count, bytes, dtype, algorithm, what it is for (gradients with the bucket, sync_bn,
// evaluation, control: a Purpose scope around the call, else the communicator's default), the
// training step, and its state with times: queued (the caller issued it), started (the
// backend began it: Gloo's thread took it; NCCL's kernel was queued on the communication
// stream), ended (completed or failed: Gloo's thread finished; NCCL's watchdog saw its event).
// The ring lives in memory another process can read: with RINGTAPE_FLIGHT_DIR set (the local
// launcher sets it) it is a file mapped shared, <dir>/rank-K.flight, which the launcher reads
// when a rank fails, even from a rank that is stopped (SIGSTOP, a debugger) or died (killed,
// crashed); without, anonymous memory. A slot is written under a per-slot sequence lock (odd
// while being written), so a reader in another process skips a torn slot instead of reading
// it half old. Recording costs a mutex and a copy of ~256 bytes per collective (a step of
// ResNet50 issues a few dozen); nothing allocates.
//
// The rank writes its records as JSON to <run dir>/logs/flight-rank-K.json (dump()) when one
// of its collectives fails (a timeout, a lost peer), on SIGUSR1 (a thread writes it; training
// goes on), and at a fatal signal (the handler wakes that thread and waits for it at most two
// seconds). The launcher writes the file of a rank that could not (stopped, killed) from its
// mapped ring.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rt::dist::flight {

enum class CallState : uint8_t { queued, started, completed, failed };
const char* state_name(CallState s);

// One collective, as the analysis reads it.
struct Record {
  uint64_t id = 0;      // the rank's record number, 1, 2, ...: the order of issue over all communicators
  std::string comm;     // the communicator's name: "main", "sync_bn"
  uint64_t seq = 0;     // its collective number (#N in its messages)
  std::string op;       // all_reduce, broadcast, all_gather, reduce_scatter, barrier
  std::string purpose;  // gradients, sync_bn, evaluation, control
  int bucket = -1;      // the gradients' bucket, or -1
  int64_t step = -1;    // the training step it was issued in; -1 before the first
  int64_t numel = 0, bytes = 0;
  std::string dtype, algo;  // algo: all_reduce's (library, ring, tree), else ""
  std::string what;         // the communicator's own description
  CallState state = CallState::queued;
  double queued = 0, started = 0, ended = 0;  // Unix seconds; 0: not (yet)
};

// One rank's records and what else the analysis says of it.
struct RankRecords {
  int rank = -1, world = 0;
  int64_t pid = 0;
  std::string host;
  std::string reason;     // why they were written
  double written = 0;     // Unix seconds
  int64_t step = -1;      // the step the rank was in
  uint64_t recorded = 0;  // collectives recorded since the start (beyond the capacity the oldest are gone)
  int64_t capacity = 0;
  std::string fate;  // what the launcher saw of the process ("stopped (SIGSTOP)", "exit status 1"), or ""
  std::string main_thread;  // where its main thread was, as the launcher read it (distributed/stack_dump.h), or ""
  std::vector<Record> records;  // oldest first
};

// JSON (the logs/flight-rank-K.json format) and back; from_json throws rt::Error naming `origin`.
std::string to_json(const RankRecords& r);
RankRecords from_json(const std::string& text, const std::string& origin);
// A rank's mapped ring (RINGTAPE_FLIGHT_DIR/rank-K.flight), read while the rank may still write
// it; throws rt::Error naming the file when it is not one.
RankRecords read_mapped(const std::string& path);
std::string mapped_name(int rank);  // "rank-K.flight"

// What a collective is for, for the calls issued on this thread inside the scope.
class Purpose {
 public:
  explicit Purpose(const char* purpose, int bucket = -1);
  ~Purpose();
  Purpose(const Purpose&) = delete;
  Purpose& operator=(const Purpose&) = delete;

 private:
  const char* prev_purpose_;
  int prev_bucket_;
};

// ---- the process's recorder ----
// Sets it up once, before the communicators issue anything: `capacity` slots (0: off), mapped
// from RINGTAPE_FLIGHT_DIR/rank-K.flight when that is set. Also installs the SIGUSR1 and
// fatal-signal dumps. Throws rt::Error when the mapped file cannot be made. A later call (a
// second process group in one process: tests) keeps the first one's recorder.
void configure(int rank, int world, int64_t capacity);
bool enabled();
// A collective issued: its id for started()/ended(), 0 when the recorder is off.
uint64_t queued(const std::string& comm, const std::string& default_purpose, uint64_t seq, const char* op,
                int64_t numel, int64_t bytes, const char* dtype, const char* algo, const std::string& what);
void started(uint64_t id);
void ended(uint64_t id, bool ok);
void set_step(int64_t step);
int64_t current_step();  // the last set_step(), -1 before (recorded or not)
// The run's directory, once known: dump() writes <run_dir>/logs/flight-rank-K.json, and the
// launcher finds it in RINGTAPE_FLIGHT_DIR/rank-K.run_dir (written with the recorder off too).
void set_run_dir(int rank, const std::string& run_dir);
std::string run_dir_name(int rank);  // "rank-K.run_dir"
std::string dump_name(int rank);     // "flight-rank-K.json"
// Writes the records as JSON to the dump path (atomically: a temporary file renamed); returns
// the path, or "" when off, without a path or on an I/O error (said on stderr). Never throws.
// `main_thread`: where this rank's main thread is, when known (distributed/stack_dump.h).
std::string dump(const std::string& reason, const std::string& main_thread = "") noexcept;
// Rank `from`'s collective timed out and it asked for this rank's stacks: written to stderr (the
// rank log) with the records, once per process, unless ringtape's launcher reads them
// (Note [Stacks of a rank without ringtape's launcher] in distributed/stack_dump.h). Never throws.
void answer_stacks_request(int from) noexcept;
// This process's records now (tests, the analysis of a run in one process).
RankRecords snapshot(const std::string& reason);

}  // namespace rt::dist::flight
