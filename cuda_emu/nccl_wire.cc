// Frames between the ranks of the NCCL fake and the exchange of a batch (nccl_wire.h).
//
// Note [Matching operations]
// NCCL trusts every rank to issue the same collectives (same operation, count, type,
// reduction and root) in the same order, and each ncclSend to meet an ncclRecv of the same
// count and type; when they do not, it hangs or corrupts memory. Here every rank sends a
// frame to every peer in each collective (the header alone where it has no data for that
// peer), and every frame carries the sender's description of its operation. A receiver
// compares it with its own before it takes the payload, so a mismatch anywhere is seen by
// both ranks involved and reported with both operations. Collectives are numbered per
// communicator, so a rank that skipped one is told apart from one that issued another
// count. A rank reads from a peer only while it expects something from it: a frame of the
// peer's next operation stays unread until this rank gets there.
//
// Note [Failure notices]
// When an exchange fails (a lost peer, a mismatch, a timeout), the rank's communicator
// shuts its connections (Note [A failed communicator] in nccl_comm.h), and a peer still
// waiting for it would only learn that this rank is gone, blaming it for what was another
// rank's death. So before that, the failing rank sends every peer whose connection is
// between two frames a notice carrying its message; a peer that reads it fails with "rank
// p's communicator failed: <why>", which names the rank really lost. Best effort: a notice
// that does not fit the socket's buffer is dropped.
#include "cuda_emu/nccl_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <deque>

namespace rt::emu::nccl {
namespace {

constexpr uint32_t kFrameMagic = 0x4e43454d;  // "NCEM"

OpDesc desc_of(const Header& h) {
  OpDesc d;
  d.kind = Kind(h.kind);
  d.dtype = ncclDataType_t(h.dtype);
  d.op = ncclRedOp_t(h.op);
  d.root = h.root;
  d.count = h.count;
  d.seq = h.seq;
  return d;
}

bool reduces(Kind k) { return k == Kind::all_reduce || k == Kind::reduce_scatter; }

// Whether `got` is the frame `want` expects.
bool same(const Header& got, const Incoming& want) {
  const OpDesc g = desc_of(got), w = want.want;
  if (Channel(got.channel) != want.channel) return false;
  if (want.channel == Channel::p2p)  // an ncclSend meets an ncclRecv
    return g.kind == Kind::send && g.dtype == w.dtype && g.count == w.count;
  return g.kind == w.kind && g.seq == w.seq && g.dtype == w.dtype && g.count == w.count &&
         (!reduces(w.kind) || g.op == w.op) && (w.kind != Kind::broadcast || g.root == w.root);
}

[[noreturn]] void mismatch(const Header& got, const Incoming& want, int me) {
  const OpDesc theirs = desc_of(got);
  // Their ncclSend is named from their side ("to rank me"), our ncclRecv from ours.
  throw Error(ncclInvalidUsage,
              "mismatched operations: rank " + std::to_string(got.from) + " issued " + describe(theirs) +
                  " where rank " + std::to_string(me) + " issued " + describe(want.want) +
                  ". Every rank must issue the same collectives (operation, count, type, reduction, root) in the same "
                  "order, and each ncclSend needs an ncclRecv of the same count and type from its peer; a real NCCL "
                  "would hang or corrupt memory here");
}

[[noreturn]] void lost(int peer, int me, int err, const std::string& what) {
  throw Error(ncclRemoteError, "rank " + std::to_string(me) + ": the connection to rank " + std::to_string(peer) +
                                   " closed during " + what +
                                   (err ? " (" + errno_text(err) + ")" : std::string()) + ": rank " +
                                   std::to_string(peer) +
                                   "'s process exited or was killed, or its communicator failed or was aborted "
                                   "(its own output says why)");
}

constexpr uint64_t kMaxNotice = 4096;  // bytes of a failure notice's message

struct PeerIo {
  std::deque<Outgoing*> out;
  uint64_t sent = 0;  // bytes of out.front() (header and payload) already sent
  std::deque<Incoming*> in[2];  // by Channel (coll, p2p)
  Header h;
  size_t header_got = 0;
  Incoming* cur = nullptr;  // the frame whose payload is arriving
  uint64_t got = 0;
  std::string notice;  // a failure notice's message, arriving into notice_in
  Incoming notice_in{};
  bool expecting() const { return cur || !in[0].empty() || !in[1].empty(); }
  bool pending() const { return !out.empty() || expecting(); }
};

// Sends what the socket takes now. True when bytes moved.
bool write_some(int fd, PeerIo& p, int peer, int me, const std::string& what) {
  bool moved = false;
  while (!p.out.empty()) {
    Outgoing& o = *p.out.front();
    const uint64_t total = sizeof(Header) + o.h.bytes;
    iovec iov[2];
    int n = 0;
    if (p.sent < sizeof(Header))
      iov[n++] = {reinterpret_cast<char*>(&o.h) + p.sent, sizeof(Header) - size_t(p.sent)};
    const uint64_t done = p.sent > sizeof(Header) ? p.sent - sizeof(Header) : 0;
    if (o.h.bytes > done) iov[n++] = {const_cast<char*>(static_cast<const char*>(o.data)) + done, size_t(o.h.bytes - done)};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = size_t(n);
    const ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EAGAIN || errno == EINTR) return moved;
      if (errno == EPIPE || errno == ECONNRESET) lost(peer, me, errno, what);
      throw Error(ncclSystemError, "rank " + std::to_string(me) + ": sending to rank " + std::to_string(peer) +
                                       " failed: " + errno_text(errno));
    }
    moved = true;
    p.sent += uint64_t(k);
    if (p.sent == total) {
      p.out.pop_front();
      p.sent = 0;
    }
  }
  return moved;
}

// A whole header has arrived from `peer`: checks it against what this rank expects next
// (Note [Matching operations]) and makes its payload's destination current.
void take_header(PeerIo& p, int peer, int me) {
  const Header& h = p.h;
  if (h.magic != kFrameMagic || h.from != peer || h.channel > uint8_t(Channel::failed) ||
      (h.channel == uint8_t(Channel::failed) && h.bytes > kMaxNotice))
    throw Error(ncclInternalError, "rank " + std::to_string(me) + ": a garbled frame from rank " +
                                       std::to_string(peer) + " (the connection is out of step)");
  if (h.channel == uint8_t(Channel::failed)) {  // its message comes next (Note [Failure notices])
    p.notice.assign(size_t(h.bytes), '\0');
    p.notice_in = Incoming{peer, Channel::failed, OpDesc{}, p.notice.data(), h.bytes};
    p.cur = &p.notice_in;
    p.got = 0;
    return;
  }
  std::deque<Incoming*>* q = h.channel == uint8_t(Channel::bye) ? nullptr : &p.in[h.channel];
  Incoming* mine = q && !q->empty() ? q->front() : (!p.in[0].empty() ? p.in[0].front() : p.in[1].front());
  if (h.channel == uint8_t(Channel::bye))
    throw Error(ncclInvalidUsage, "rank " + std::to_string(peer) + " finalized its communicator after " +
                                      std::to_string(h.seq) + " collectives, while rank " + std::to_string(me) +
                                      " waits for it in " + describe(mine->want) +
                                      ": every rank must issue the same operations before ncclCommFinalize");
  if (!same(h, *mine)) mismatch(h, *mine, me);
  if (h.bytes != mine->bytes)
    throw Error(ncclInternalError, "rank " + std::to_string(peer) + " sent " + std::to_string(h.bytes) +
                                       " bytes for " + describe(mine->want) + ", expected " +
                                       std::to_string(mine->bytes));
  q->pop_front();
  p.cur = mine;
  p.got = 0;
}

// Receives what has arrived, while this rank expects something from the peer.
bool read_some(int fd, PeerIo& p, int peer, int me, const std::string& what) {
  bool moved = false;
  while (p.expecting()) {
    char* dst;
    size_t want;
    if (!p.cur) {
      dst = reinterpret_cast<char*>(&p.h) + p.header_got;
      want = sizeof(Header) - p.header_got;
    } else {
      dst = static_cast<char*>(p.cur->dst) + p.got;
      want = size_t(p.cur->bytes - p.got);
    }
    ssize_t k = want ? recv(fd, dst, want, MSG_DONTWAIT) : 0;
    if (want && k == 0) lost(peer, me, 0, what);
    if (k < 0) {
      if (errno == EAGAIN || errno == EINTR) return moved;
      if (errno == ECONNRESET) lost(peer, me, errno, what);
      throw Error(ncclSystemError, "rank " + std::to_string(me) + ": receiving from rank " + std::to_string(peer) +
                                       " failed: " + errno_text(errno));
    }
    moved = moved || k > 0;
    if (!p.cur) {
      p.header_got += size_t(k);
      if (p.header_got < sizeof(Header)) continue;
      p.header_got = 0;
      take_header(p, peer, me);
    } else {
      p.got += uint64_t(k);
    }
    if (p.cur && p.got == p.cur->bytes) {
      if (p.cur == &p.notice_in)
        throw Error(ncclRemoteError, "rank " + std::to_string(peer) + "'s communicator failed while rank " +
                                         std::to_string(me) + " waited for it in " + what + ": " + p.notice);
      p.cur = nullptr;
    }
  }
  return moved;
}

// Tells the peers why this rank's communicator is failing (Note [Failure notices]).
void send_notices(const std::vector<Fd>& conns, const std::vector<PeerIo>& peers, int me, const std::string& why) {
  const std::string msg = why.substr(0, size_t(kMaxNotice));
  Header h = header(Channel::failed, OpDesc{}, me, msg.size());
  for (size_t r = 0; r < conns.size(); ++r) {
    if (!conns[r] || peers[r].sent != 0) continue;  // none, or in the middle of a frame
    iovec iov[2] = {{&h, sizeof h}, {const_cast<char*>(msg.data()), msg.size()}};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = 2;
    [[maybe_unused]] const ssize_t k = sendmsg(conns[r].get(), &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

void move_all(const std::vector<Fd>& conns, int me, const Waker& stop, std::vector<PeerIo>& peers,
              const std::string& what) {
  auto last_progress = Clock::now();
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  for (;;) {
    fds.clear();
    ranks.clear();
    for (size_t r = 0; r < peers.size(); ++r) {
      const PeerIo& p = peers[r];
      if (!p.pending()) continue;
      fds.push_back({conns[r].get(), short((p.out.empty() ? 0 : POLLOUT) | (p.expecting() ? POLLIN : 0)), 0});
      ranks.push_back(int(r));
    }
    if (fds.empty()) return;
    fds.push_back({stop.fd(), POLLIN, 0});
    const auto deadline = last_progress + peer_timeout();
    if (poll(fds.data(), fds.size(), poll_ms(deadline)) < 0 && errno != EINTR)
      throw Error(ncclSystemError, "poll() failed: " + errno_text(errno));
    if (stop.is_set()) throw stopped();
    bool moved = false;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const short ev = fds[i].revents;
      if (!ev) continue;
      PeerIo& p = peers[size_t(ranks[i])];
      if (!p.out.empty() && (ev & (POLLOUT | POLLERR | POLLHUP))) moved |= write_some(fds[i].fd, p, ranks[i], me, what);
      if (p.expecting() && (ev & (POLLIN | POLLERR | POLLHUP))) moved |= read_some(fds[i].fd, p, ranks[i], me, what);
    }
    if (moved) {
      last_progress = Clock::now();
    } else if (Clock::now() >= deadline) {
      std::string waiting;
      for (int r : ranks) {
        const PeerIo& p = peers[size_t(r)];
        waiting += std::string(waiting.empty() ? "" : "; ") + "rank " + std::to_string(r) + " (" +
                   (p.expecting() ? "receiving from it" : "") + (p.expecting() && !p.out.empty() ? ", " : "") +
                   (p.out.empty() ? "" : "sending to it") + ")";
      }
      throw Error(ncclRemoteError,
                  "rank " + std::to_string(me) + " waited " + timeout_text() + " in " + what +
                      " without progress from " + waiting +
                      ". A real NCCL would hang here: a peer did not issue the matching operation (a skipped or "
                      "reordered collective, an ncclSend without its ncclRecv, ncclSend/ncclRecv pairs outside "
                      "ncclGroupStart/End that wait on each other) or stopped without exiting");
    }
  }
}

}  // namespace

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::all_reduce: return "ncclAllReduce";
    case Kind::broadcast: return "ncclBroadcast";
    case Kind::all_gather: return "ncclAllGather";
    case Kind::reduce_scatter: return "ncclReduceScatter";
    case Kind::send: return "ncclSend";
    case Kind::recv: return "ncclRecv";
  }
  return "an unknown operation";
}

std::string describe(const OpDesc& d) {
  std::string s = std::string(kind_name(d.kind)) + " #" + std::to_string(d.seq);
  if (d.kind == Kind::send) s += " to rank " + std::to_string(d.root);
  if (d.kind == Kind::recv) s += " from rank " + std::to_string(d.root);
  s += " (" + std::to_string(d.count) + " x " + type_name(d.dtype);
  if (reduces(d.kind)) s += std::string(", ") + op_name(d.op);
  if (d.kind == Kind::broadcast) s += ", root " + std::to_string(d.root);
  return s + ")";
}

Header header(Channel c, const OpDesc& d, int from, uint64_t bytes) {
  Header h;
  h.magic = kFrameMagic;
  h.channel = uint8_t(c);
  h.kind = uint8_t(d.kind);
  h.dtype = uint8_t(d.dtype);
  h.op = int32_t(d.op);
  h.root = d.root;
  h.from = from;
  h.count = d.count;
  h.seq = d.seq;
  h.bytes = bytes;
  return h;
}

void exchange(const std::vector<Fd>& conns, int me, const Waker& stop, std::vector<Outgoing>& out,
              std::vector<Incoming>& in, const std::string& what) {
  std::vector<PeerIo> peers(conns.size());
  for (Outgoing& o : out) peers[size_t(o.peer)].out.push_back(&o);
  for (Incoming& i : in) peers[size_t(i.peer)].in[size_t(i.channel)].push_back(&i);
  try {
    move_all(conns, me, stop, peers, what);
  } catch (const Error& e) {
    if (!stop.is_set()) send_notices(conns, peers, me, e.what());  // not after an abort
    throw;
  }
}

void say_goodbye(const std::vector<Fd>& conns, int me, uint64_t collectives, Clock::time_point deadline) {
  OpDesc d;
  d.seq = collectives;
  const Header h = header(Channel::bye, d, me, 0);
  const Waker never;
  for (size_t r = 0; r < conns.size(); ++r) {
    if (!conns[r]) continue;
    try {
      send_all(conns[r].get(), &h, sizeof h, deadline, never, "rank " + std::to_string(r));
    } catch (const Error&) {  // that peer is gone or stuck: it waits for nothing from us
    }
  }
}

}  // namespace rt::emu::nccl
