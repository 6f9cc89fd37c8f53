// Communicator: collectives and point-to-point transfers between the ranks of a job; one
// interface for CPU tensors (Gloo, distributed/gloo_communicator.h) and CUDA tensors (NCCL,
// distributed/nccl_communicator.h). The data-parallel trainer stands on it.
//
// Tensors are treated as flat arrays of numel() elements in memory order; they must live on
// the communicator's device. Every rank makes the same collective calls, with the same
// dtypes and element counts, in the same order (Note [Issue order] in distributed/work.h). Every
// call returns a Work at once and runs in the background; results are valid after wait()
// (or, for CUDA, on a stream after block_stream()). A tensor must not be written by the
// caller until then; the Work keeps its storage alive.
//
// Every call has a timeout (kDefaultTimeout: the communicator's CommOptions::timeout),
// measured from the moment the call starts running. A timeout or a lost peer makes wait()
// throw rt::Error naming the operation, the peer rank when it is known and the elapsed time;
// the communicator is broken from then on (every later call fails the same way): a job that
// lost a rank must restart.
//
// Note [All-reduce algorithms]
// all_reduce takes an AllReduceAlgo.
//   library  the backend's own (Gloo's ring allreduce; ncclAllReduce).
//   ring     ours: reduce-scatter then all-gather around the ring of ranks, pipelined in
//            slices (distributed/allreduce_algos.h). Bandwidth-optimal: each rank sends and
//            receives 2(N-1)/N of the data, in 2(N-1) steps.
//   tree     ours: NCCL's double binary tree: two binary trees, each reducing half of the
//            data up to its root and broadcasting it back down, pipelined in slices; a
//            rank is inside one tree and a leaf of the other, so both directions of every
//            link carry data. About 2 log2(N) steps instead of 2(N-1): lower latency
//            for small messages at N >= 4.
// ring and tree are written once over the backend's point-to-point transfers and local
// reduce, so they run on Gloo and on NCCL alike.
//
//   ring, N = 4: the data in 4 chunks c0..c3. Reduce-scatter step s: rank r sends chunk
//   (r-s) mod 4 to rank r+1, which adds it into its own copy of that chunk.
//     step 0:  r0 -c0-> r1 -c1-> r2 -c2-> r3 -c3-> r0
//     step 1:  r0 -c3-> r1 -c0-> r2 -c1-> r3 -c2-> r0
//     step 2:  r0 -c2-> r1 -c3-> r2 -c0-> r3 -c1-> r0   now rank r holds chunk r+1 reduced
//   then 3 all-gather steps pass the reduced chunks on around the same ring.
//
//   tree, N = 8: each tree reduces its half of the data up to its root, which sends the
//   result back down; the interior ranks of one tree are the leaves of the other.
//     tree 0 (first half)          tree 1 (second half)
//     7                            0
//     `-- 3                        `-- 4
//         |-- 1                        |-- 6
//         |   |-- 0                    |   |-- 7
//         |   `-- 2                    |   `-- 5
//         `-- 5                        `-- 2
//             |-- 4                        |-- 3
//             `-- 6                        `-- 1
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "distributed/communicator_ops.h"
#include "distributed/work.h"
#include "engine/tensor.h"

namespace rt::dist {

using Millis = std::chrono::milliseconds;

// A call's timeout argument meaning "the communicator's CommOptions::timeout".
inline constexpr Millis kDefaultTimeout{-1};

struct CommOptions {
  // Every call's timeout unless the call gives its own; also bounds the setup (rendezvous).
  Millis timeout = std::chrono::seconds(60);
  // Store keys of this communicator start with it: two communicators of one job on the same
  // store need different prefixes.
  std::string prefix = "rt";
  // The unit of the ring and tree pipelines: transfers of at most this many bytes, so that
  // sending one slice overlaps reducing the previous one. 1 MiB, like Gloo's segments: on
  // 2 cores over loopback, 256 KiB slices cost the ring half its bandwidth (per-message
  // overhead) and 4 MiB slices gained nothing.
  size_t slice_bytes = size_t(1) << 20;
  // The address this rank's connections listen on (Gloo's pairs, the liveness links).
  // "" = the interface that routes to the store's host.
  std::string host;
  // CUDA: timed events around each call (Note [Device timeline] in distributed/work.h), what the
  // reducer's overlap figure reads on GPUs. Off, the events only order and signal, which
  // costs less to record and query.
  bool timed_events = false;
  // The flight recorder's names (Note [Flight recorder] in distributed/flight_recorder.h): this
  // communicator's, and what its calls are for unless a flight::Purpose scope says otherwise.
  std::string name = "main";
  std::string purpose = "control";
};

// The address this rank's connections listen on: CommOptions::host, else the one that
// routes to MASTER_ADDR (torchrun's contract), else loopback (one machine).
std::string listen_host(const CommOptions& o);

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  Device device() const { return device_; }
  virtual const char* backend() const = 0;  // "gloo", "nccl"
  const CommOptions& options() const { return opts_; }

  // t <- op over every rank's t, in place. avg is the sum divided by the world size.
  Work all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum, AllReduceAlgo algo = AllReduceAlgo::library,
                  Millis timeout = kDefaultTimeout);
  // t <- root's t, in place.
  Work broadcast(const Tensor& t, int root, Millis timeout = kDefaultTimeout);
  // out (world * in.numel() elements, contiguous) <- every rank's `in`, in rank order.
  Work all_gather(const Tensor& out, const Tensor& in, Millis timeout = kDefaultTimeout);
  // out (n elements) <- op over every rank's `in` (world * n elements) of block rank().
  Work reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum,
                      Millis timeout = kDefaultTimeout);
  // Returns when every rank has reached it.
  Work barrier(Millis timeout = kDefaultTimeout);
  // Point to point. Transfers between two ranks are matched in issue order; a send may not
  // complete before the peer issued the matching recv, so two ranks that send to each other
  // issue send_recv() (both posted together) rather than send() then recv().
  Work send(const Tensor& t, int dst, Millis timeout = kDefaultTimeout);
  Work recv(const Tensor& t, int src, Millis timeout = kDefaultTimeout);
  Work send_recv(const Tensor& sent, int dst, const Tensor& received, int src, Millis timeout = kDefaultTimeout);

  // Waits until the calls issued so far have ended, then throws the failure that broke this
  // communicator, if one did. NCCL's calls can end by an abort after the caller's stream
  // went on with their results (Work::block_stream returns before they fail), so what ran
  // after them may have used partly reduced values: Note [No checkpoint after a failure]
  // in train/trainer.cc. Gloo's calls are waited for on the host, which sees their errors.
  virtual void check_healthy() {}

  // Note [Collectives in a CUDA graph]
  // A call made while the caller's stream is being captured (a training step captured as a
  // CUDA graph: Note [The training step as a CUDA graph] in train/step.cc) becomes part of the
  // graph: NCCL captures it, with the communication stream forked from the caller's and joined
  // back by block_stream, and it runs again at every replay. NCCL requires every rank to
  // capture the same calls and to launch the graphs that hold them together (the caller's
  // part: TrainStep captures on every rank at the same step). Such a call's Work only orders
  // streams: the host cannot wait for it (its events belong to the capture, and CUDA refuses
  // host queries of them), so the watchdog does not see it either. A replay is watched whole
  // instead: watch() after each graph launch gives the watchdog one entry that completes when
  // the stream passes the replay, bounded by the timeout and ended by a lost peer like any
  // call, and named for what it holds. Gloo (CPU processes) cannot be captured.
  //
  // A Work that completes when `stream` (on this communicator's device) has passed what was
  // queued on it so far, watched like a call of this communicator: `what` in its messages.
  virtual Work watch(const Stream& stream, const std::string& what, Millis timeout);

 protected:
  Communicator(int rank, int world, Device device, CommOptions opts);

  // One call, checked and described; what a backend runs.
  enum class Kind : uint8_t { all_reduce, broadcast, all_gather, reduce_scatter, barrier, p2p };
  struct Call {
    Kind kind;
    std::string what;  // for messages: "all_reduce #12 (ring, sum, f32 x 1000)"
    // all_reduce, broadcast: a. all_gather, reduce_scatter: a = out, b = in.
    // p2p: a = the tensor sent to `dst` and b = the one received from `src` (either may be
    // undefined).
    Tensor a, b;
    ReduceOp op = ReduceOp::sum;
    AllReduceAlgo algo = AllReduceAlgo::library;
    int root = -1, dst = -1, src = -1;
    Millis timeout{0};
    uint64_t flight = 0;  // its flight record (flight::started/ended), 0: none
  };
  virtual Work run(Call call) = 0;
  // Whether the backend reduces this dtype (the base has checked that it is floating).
  virtual void check_reducible(DType t, const std::string& what) const = 0;

 private:
  Call make_call(Kind kind, std::string what, Millis timeout) const;
  // Records collective `c` (tensor `t`: what it moves per rank) in the flight recorder and runs it.
  Work record_and_run(Call c, const char* op, const Tensor& t);
  void check_tensor(const Tensor& t, const char* op, const char* arg) const;
  void check_peer(int peer, const char* op, const char* arg) const;
  // Floating, and reduced by the backend.
  void check_reduction(DType t, const std::string& what) const;
  // all_gather / reduce_scatter: `whole` is world blocks the size of `block`.
  void check_blocks(const Tensor& whole, const char* whole_name, const Tensor& block, const char* block_name,
                    const std::string& what) const;

  int rank_, world_;
  Device device_;
  CommOptions opts_;
  uint64_t collectives_ = 0;  // collective calls issued (the #N in messages)
  uint64_t p2p_ = 0;          // point-to-point calls issued
};

}  // namespace rt::dist
