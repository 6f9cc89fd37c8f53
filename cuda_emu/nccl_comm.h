// One rank's communicator in the NCCL fake: its setup (on a thread of its own, so that a
// non-blocking ncclCommInitRankConfig returns at once), its state as
// ncclCommGetAsyncError reports it, the order its operations run in, and its end
// (finalize, destroy, abort). The C API (nccl_api.cc) holds it through a shared_ptr, as do
// its operations queued on streams, so that an abort never frees what a queued operation
// still uses.
#pragma once

#include <nccl.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu/nccl_socket.h"

namespace rt::emu::nccl {

class Comm {
 public:
  Comm(int nranks, int rank, int device, bool blocking);
  ~Comm();  // joins what is left of its threads; never throws
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  const int nranks, rank, device;
  const bool blocking;

  // ---- setup (ncclCommInitRankConfig) ------------------------------------------------------
  // Checks the id (throws Error) and joins its communicator on a thread.
  void start_setup(const ncclUniqueId& id);
  // Waits until the setup thread (and a non-blocking finalize) has ended.
  void join_threads();

  // ---- state (ncclCommGetAsyncError) ---------------------------------------------------------
  ncclResult_t state() const;
  std::string message() const;  // the failure's, "" while none
  // Throws Error unless operations may be issued now (NCCL's ncclCommEnsureReady).
  void check_usable(const char* api) const;
  // Note [A failed communicator]
  // The first failure becomes the asynchronous error. From then on the communicator moves
  // no data: its exchanges stop, and its connections are shut, so that its peers learn at
  // once that this rank is out (ncclRemoteError naming it) instead of at their own timeout.
  // Its operations in flight, and those queued later, then wait on their streams as NCCL's
  // kernels spin after a network error: until ncclCommAbort (or ncclCommDestroy) ends them,
  // their outputs left as they were. A program that trusts a completed stream without
  // asking ncclCommGetAsyncError thus hangs here as on a GPU, instead of going on with
  // stale data. As a last resort they end after the peer timeout (Note [Peer timeout]) with
  // a warning on stderr.
  void fail(const Error& e);
  bool failed() const;
  // On a stream's worker, after a failure: waits for the abort (Note [A failed communicator]).
  void hold(const std::string& what);

  // ---- operations ---------------------------------------------------------------------------
  // Numbers, in issue order: tickets order the operations (Note [Issue order in the fake]),
  // collectives and transfers per peer are numbered for
  // matching (Note [Matching operations]).
  uint64_t issue_ticket();
  uint64_t next_collective();
  uint64_t next_send(int peer);
  uint64_t next_recv(int peer);
  // On a stream's worker: waits until every earlier ticket has retired; false when the
  // communicator failed or was aborted (the operation must then do nothing). end() after a
  // true begin().
  bool begin(uint64_t ticket, const std::string& what);
  void end();
  void retire(uint64_t ticket);  // exactly once per ticket, run or not
  const std::vector<Fd>& conns() const { return conns_; }  // by rank; valid between begin() and end()
  const Waker& stop() const { return stop_; }

  // ---- the end --------------------------------------------------------------------------------
  // ncclCommFinalize: waits for the operations issued so far and tells the peers; blocking,
  // or on a thread (then ncclInProgress).
  ncclResult_t finalize();
  // ncclCommDestroy: finalizes if that was not done, then closes the connections.
  void destroy();
  // ncclCommAbort: ends every wait now, from any thread, and closes the connections once
  // the operation running (if any) has left.
  void abort();

 private:
  enum class Phase { setup, ready, finalizing, finalized, closed };
  void setup(ncclUniqueId id);
  void do_finalize();
  void close_connections();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::setup;
  ncclResult_t error_ = ncclSuccess;
  std::string message_;
  bool aborted_ = false;
  uint64_t issued_ = 0, turn_ = 0;  // tickets handed out; the next to run
  std::set<uint64_t> retired_;      // retired out of order (an operation that never ran)
  int running_ = 0;
  uint64_t collectives_ = 0;
  std::vector<uint64_t> sends_, recvs_;  // per peer
  std::vector<Fd> conns_;
  Waker stop_;
  std::thread setup_thread_, finalize_thread_;
};

}  // namespace rt::emu::nccl
