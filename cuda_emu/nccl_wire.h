// What the ranks of the NCCL fake say to each other on their mesh connections: frames of a
// header and a payload. Every frame names the operation it belongs to, so the receiver
// checks it against its own (Note [Matching operations]) before it takes the payload.
// exchange() moves a batch of frames to and from any number of peers at once, so that
// pairs of ranks sending to each other never wait on one another.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_emu/nccl_socket.h"

namespace rt::emu::nccl {

enum class Kind : uint8_t { all_reduce, broadcast, all_gather, reduce_scatter, send, recv };

// One operation as a rank issued it.
struct OpDesc {
  Kind kind = Kind::all_reduce;
  ncclDataType_t dtype = ncclInt8;
  ncclRedOp_t op = ncclSum;  // reductions only
  int root = 0;              // broadcast: the root; send/recv: the peer
  size_t count = 0;          // all_gather: per rank; reduce_scatter: of each rank's result
  uint64_t seq = 0;          // collectives: #n in the communicator from 1; send/recv: per peer and direction
};
const char* kind_name(Kind k);  // "ncclAllReduce"
// "ncclAllReduce #5 (1003 x ncclFloat32, ncclSum)", "ncclSend #2 to rank 1 (64 x ncclInt8)"
std::string describe(const OpDesc& d);

// Collectives and point-to-point transfers are matched separately: a group may hold both,
// in any order. `bye` says that the sender finalized its communicator; `failed` carries the
// message of a failure that ended the sender's communicator (Note [Failure notices]).
enum class Channel : uint8_t { coll = 0, p2p = 1, bye = 2, failed = 3 };

// The wire header (plain bytes; both ends are this build on this machine).
struct Header {
  uint32_t magic = 0;
  uint8_t channel = 0, kind = 0, dtype = 0, pad = 0;
  int32_t op = 0;
  int32_t root = 0;
  int32_t from = 0;
  uint64_t count = 0, seq = 0;
  uint64_t bytes = 0;  // payload after the header
};
Header header(Channel c, const OpDesc& d, int from, uint64_t bytes);

struct Outgoing {
  int peer;
  Header h;
  const void* data;  // h.bytes
};
struct Incoming {
  int peer;
  Channel channel;
  OpDesc want;  // what this rank issued (for send/recv: its ncclRecv)
  void* dst;
  uint64_t bytes;
};

// Sends `out` (in order, per peer) and receives `in` (in order, per peer and channel) over
// `conns` (by rank) until all have moved. Throws Error: ncclInvalidUsage for a frame that
// does not match (naming both ranks' operations) or a peer that finalized, ncclRemoteError
// for a closed connection or a peer silent for the peer timeout, stopped() when `stop` is
// set. `what` names the batch for messages; `me` is this rank.
void exchange(const std::vector<Fd>& conns, int me, const Waker& stop, std::vector<Outgoing>& out,
              std::vector<Incoming>& in, const std::string& what);

// Tells every peer that this rank will send nothing more (ncclCommFinalize); best effort,
// bounded by `deadline`: a peer that is gone is no longer waiting.
void say_goodbye(const std::vector<Fd>& conns, int me, uint64_t collectives, Clock::time_point deadline);

}  // namespace rt::emu::nccl
