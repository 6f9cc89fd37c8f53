// Bootstrap of the NCCL fake, as NCCL's own: ncclGetUniqueId starts a root (a thread of the
// calling process, listening on 127.0.0.1) and writes its address and a random token into
// the id; every rank sends the root what the others need to know about it (rank, device,
// host, the port it accepts peers on), the root answers each with everybody's, and the
// ranks connect to one another directly (a full mesh of TCP connections).
#pragma once

#include <nccl.h>

#include <cstdint>
#include <vector>

#include "cuda_emu/nccl_socket.h"

namespace rt::emu::nccl {

// What one rank tells the others (through the root). Plain bytes on the wire.
struct PeerInfo {
  uint64_t token[2];  // the id's: a rank with another id's token is refused
  int32_t nranks, rank, device, pid;
  uint16_t port;      // where the rank accepts connections from higher ranks
  uint16_t pad;
  char bus_id[20];    // cudaDeviceGetPCIBusId of its device
  char host[64];
};

// A new id; its root runs from now on in a thread of this process and ends once every rank
// has joined, or after the peer timeout (Note [Peer timeout] in nccl_common.h).
ncclUniqueId make_unique_id();

// Reads the id (ncclInvalidArgument when it was not made by ncclGetUniqueId) and fills in
// self.token.
void read_id(const ncclUniqueId& id, PeerInfo* self);

// Sends `self` to the id's root and returns every rank's info, by rank.
std::vector<PeerInfo> exchange_info(const ncclUniqueId& id, const PeerInfo& self, Clock::time_point deadline,
                                    const Waker& stop);

// NCCL's check: two ranks on the same GPU of one host fail with ncclInvalidUsage.
void check_devices(const std::vector<PeerInfo>& all);

// Connects this rank to every other: it connects to lower ranks and accepts higher ones on
// `listener`. Returns the connections by rank (this rank's own entry empty).
std::vector<Fd> connect_mesh(const std::vector<PeerInfo>& all, int rank, const Fd& listener, Clock::time_point deadline,
                             const Waker& stop);

}  // namespace rt::emu::nccl
