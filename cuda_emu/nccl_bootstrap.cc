// The unique id, its root and the mesh of the NCCL fake (nccl_bootstrap.h).
#include "cuda_emu/nccl_bootstrap.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>

namespace rt::emu::nccl {
namespace {

constexpr char kMagic[8] = "rtnccl1";

// The id's bytes: the root's address and the token every rank must present.
struct IdLayout {
  char magic[8];
  uint32_t addr;  // network order
  uint16_t port;
  uint16_t pad;
  int32_t pid;    // the process that made the id and hosts its root (for messages)
  uint32_t pad2;
  uint64_t token[2];
};
static_assert(sizeof(IdLayout) <= sizeof(ncclUniqueId), "the id must fit NCCL's 128 bytes");

// The root's answer to a rank: code 0 and the table of every rank's PeerInfo, or an error
// code and its message.
struct Reply {
  int32_t code;
  uint32_t bytes;
};

struct PeerHello {  // the first bytes on a mesh connection, from the connecting (higher) rank
  uint64_t token[2];
  int32_t rank;
  int32_t pad;
};

IdLayout layout_of(const ncclUniqueId& id) {
  IdLayout l;
  std::memcpy(&l, &id, sizeof l);
  return l;
}

std::string root_name(const IdLayout& l) {
  return "the bootstrap root (in process " + std::to_string(l.pid) + ", which called ncclGetUniqueId)";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? (i + 1 == ranks.size() ? " and " : ", ") : "") + std::to_string(ranks[i]);
  return (ranks.size() == 1 ? "rank " : "ranks ") + s;
}

// ---- the root ------------------------------------------------------------------------------
struct Joiner {
  Fd fd;
  PeerInfo info;
};

void reply_error(int fd, ncclResult_t code, const std::string& msg) {
  const Reply r{int32_t(code), uint32_t(msg.size())};
  const Waker never;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  try {
    send_all(fd, &r, sizeof r, deadline, never, "a rank");
    send_all(fd, msg.data(), msg.size(), deadline, never, "a rank");
  } catch (const Error&) {  // that rank is gone: nothing to tell it
  }
}

// Note [Bootstrap root]
// Serves one id. Collects a PeerInfo from every rank, refuses ranks that do not fit
// (another token, another world size, a rank taken twice), and sends the table to all once
// complete. A rank that leaves early (its connection closes) or never comes fails the
// others with a message naming it, instead of leaving them waiting.
void root_main(Fd listener, IdLayout id) {
  const auto deadline = Clock::now() + peer_timeout();
  const Waker never;
  std::vector<Joiner> joined;
  int nranks = -1;
  auto fail_all = [&](ncclResult_t code, const std::string& msg) {
    for (Joiner& j : joined) reply_error(j.fd.get(), code, msg);
    warn(msg);
  };
  while (nranks < 0 || int(joined.size()) < nranks) {
    std::vector<pollfd> p{{listener.get(), POLLIN, 0}};
    for (const Joiner& j : joined) p.push_back({j.fd.get(), POLLIN, 0});
    if (poll(p.data(), p.size(), poll_ms(deadline)) < 0 && errno != EINTR) {
      fail_all(ncclSystemError, "the bootstrap root's poll() failed: " + errno_text(errno));
      return;
    }
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (int r = 0; r < std::max(nranks, 1); ++r)
        if (std::none_of(joined.begin(), joined.end(), [&](const Joiner& j) { return j.info.rank == r; }))
          missing.push_back(r);
      fail_all(ncclRemoteError, nranks < 0 ? "no rank called ncclCommInitRank with this id within " + timeout_text()
                                           : rank_list(missing) + " of " + std::to_string(nranks) +
                                                 " never called ncclCommInitRank with this id within " +
                                                 timeout_text() + "; the others waited for them");
      return;
    }
    // A rank that already joined sends nothing more: readable means it closed.
    for (size_t i = 1; i < p.size(); ++i) {
      if (!p[i].revents) continue;
      char c;
      if (recv(p[i].fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) == 0 || (p[i].revents & (POLLERR | POLLHUP))) {
        const int r = joined[i - 1].info.rank;
        joined.erase(joined.begin() + long(i - 1));
        fail_all(ncclRemoteError, "rank " + std::to_string(r) +
                                      " left before every rank had joined the communicator (its process exited "
                                      "or it aborted its communicator during ncclCommInitRank)");
        return;
      }
    }
    if (!(p[0].revents & POLLIN)) continue;
    Joiner j;
    try {
      j.fd = accept_one(listener.get(), deadline, never, "a rank");
      recv_all(j.fd.get(), &j.info, sizeof j.info, deadline, never, "a rank");
    } catch (const Error&) {
      continue;  // a connection that was not a rank of ours, or one that died at once
    }
    const PeerInfo& in = j.info;
    if (in.token[0] != id.token[0] || in.token[1] != id.token[1]) {
      reply_error(j.fd.get(), ncclInvalidUsage, "this ncclUniqueId's root belongs to another communicator (a stale "
                                                "or reused id?): pass every rank the id that rank 0 made this time");
      continue;
    }
    if (nranks < 0) nranks = in.nranks;
    std::string bad;
    if (in.nranks != nranks)
      bad = "rank " + std::to_string(in.rank) + " called ncclCommInitRank with nranks " + std::to_string(in.nranks) +
            " but rank " + std::to_string(joined.front().info.rank) + " with nranks " + std::to_string(nranks) +
            ": every rank must pass the same world size";
    for (const Joiner& o : joined)
      if (o.info.rank == in.rank)
        bad = "two processes (pids " + std::to_string(o.info.pid) + " and " + std::to_string(in.pid) +
              ") both called ncclCommInitRank as rank " + std::to_string(in.rank) + " of " +
              std::to_string(nranks) + ": every rank must pass its own rank (RANK)";
    joined.push_back(std::move(j));
    if (!bad.empty()) {
      fail_all(ncclInvalidUsage, bad);
      return;
    }
  }
  std::vector<PeerInfo> table(static_cast<size_t>(nranks));
  for (const Joiner& j : joined) table[size_t(j.info.rank)] = j.info;
  const Reply r{0, uint32_t(table.size() * sizeof(PeerInfo))};
  const auto send_deadline = Clock::now() + peer_timeout();
  // This process's own ranks last: one that fails its init on the table (check_devices) may end
  // the process, and this thread with it, before the other processes had theirs (they then saw
  // a closed root instead of the reason: nccl_fault_test's duplicate-GPU case, 1 CI run).
  std::stable_partition(joined.begin(), joined.end(), [](const Joiner& j) { return j.info.pid != int32_t(getpid()); });
  for (Joiner& j : joined) {
    try {
      send_all(j.fd.get(), &r, sizeof r, send_deadline, never, "a rank");
      send_all(j.fd.get(), table.data(), r.bytes, send_deadline, never, "a rank");
    } catch (const Error&) {  // that rank died now: its peers find out when they connect to it
    }
  }
}

}  // namespace

ncclUniqueId make_unique_id() {
  IdLayout l{};
  std::memcpy(l.magic, kMagic, sizeof kMagic);
  l.addr = htonl(INADDR_LOOPBACK);
  l.pid = int32_t(getpid());
  std::random_device rd;
  for (uint64_t& t : l.token) t = (uint64_t(rd()) << 32) ^ rd();
  Fd listener = listen_loopback(&l.port);
  std::thread(root_main, std::move(listener), l).detach();  // ends by itself (Note [Bootstrap root])
  ncclUniqueId id{};
  std::memcpy(&id, &l, sizeof l);
  info("bootstrap root of a new id listens on 127.0.0.1:" + std::to_string(l.port));
  return id;
}

void read_id(const ncclUniqueId& id, PeerInfo* self) {
  const IdLayout l = layout_of(id);
  if (std::memcmp(l.magic, kMagic, sizeof kMagic) != 0)
    throw Error(ncclInvalidArgument, "the ncclUniqueId was not made by ncclGetUniqueId (or was corrupted on its "
                                     "way): rank 0 must call ncclGetUniqueId and pass its bytes to every rank");
  self->token[0] = l.token[0];
  self->token[1] = l.token[1];
}

std::vector<PeerInfo> exchange_info(const ncclUniqueId& id, const PeerInfo& self, Clock::time_point deadline,
                                    const Waker& stop) {
  const IdLayout l = layout_of(id);
  const std::string who = root_name(l);
  Fd fd = connect_to(l.addr, l.port, deadline, stop, who);
  send_all(fd.get(), &self, sizeof self, deadline, stop, who);
  Reply r;
  recv_all(fd.get(), &r, sizeof r, deadline, stop, who);
  if (r.code != 0) {
    std::string msg(r.bytes, '\0');
    recv_all(fd.get(), msg.data(), msg.size(), deadline, stop, who);
    throw Error(ncclResult_t(r.code), msg);
  }
  if (r.bytes != size_t(self.nranks) * sizeof(PeerInfo))
    throw Error(ncclInternalError, who + " answered with a table of " + std::to_string(r.bytes) + " bytes for " +
                                       std::to_string(self.nranks) + " ranks");
  std::vector<PeerInfo> all(static_cast<size_t>(self.nranks));
  recv_all(fd.get(), all.data(), r.bytes, deadline, stop, who);
  return all;
}

void check_devices(const std::vector<PeerInfo>& all) {
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j)
      if (!std::strcmp(all[i].host, all[j].host) && !std::strcmp(all[i].bus_id, all[j].bus_id))
        throw Error(ncclInvalidUsage,
                    "Duplicate GPU detected : rank " + std::to_string(i) + " and rank " + std::to_string(j) +
                        " both on CUDA device " + std::to_string(all[i].device) + " (bus id " + all[i].bus_id +
                        ") of host " + all[i].host +
                        ". Each rank of a communicator needs a GPU of its own: call cudaSetDevice(LOCAL_RANK) (the "
                        "rank's own device) before ncclCommInitRank");
}

std::vector<Fd> connect_mesh(const std::vector<PeerInfo>& all, int rank, const Fd& listener, Clock::time_point deadline,
                             const Waker& stop) {
  const int n = int(all.size());
  std::vector<Fd> conns(all.size());
  const PeerHello hello{{all[size_t(rank)].token[0], all[size_t(rank)].token[1]}, rank, 0};
  for (int j = 0; j < rank; ++j) {
    const std::string who = "rank " + std::to_string(j);
    Fd fd = connect_to(htonl(INADDR_LOOPBACK), all[size_t(j)].port, deadline, stop, who);
    send_all(fd.get(), &hello, sizeof hello, deadline, stop, who);
    conns[size_t(j)] = std::move(fd);
  }
  for (int k = rank + 1; k < n; ++k) {
    std::vector<int> missing;
    for (int j = rank + 1; j < n; ++j)
      if (!conns[size_t(j)]) missing.push_back(j);
    const std::string who = rank_list(missing) + " (to connect to rank " + std::to_string(rank) + ")";
    Fd fd = accept_one(listener.get(), deadline, stop, who);
    PeerHello h;
    recv_all(fd.get(), &h, sizeof h, deadline, stop, who);
    if (h.token[0] != hello.token[0] || h.token[1] != hello.token[1] || h.rank <= rank || h.rank >= n ||
        conns[size_t(h.rank)])
      throw Error(ncclInternalError, "rank " + std::to_string(rank) + " was connected to by a stranger claiming rank " +
                                         std::to_string(h.rank) + " (another communicator's token or a rank twice)");
    conns[size_t(h.rank)] = std::move(fd);
  }
  return conns;
}

}  // namespace rt::emu::nccl
