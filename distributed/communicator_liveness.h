// PeerLiveness: one plain TCP connection from every rank to every other rank, carrying
// a heartbeat byte twice a second and a goodbye byte when a rank shuts down in order.
// Note [Silent peers]
// A process that is alive but stopped (SIGSTOP, a debugger) or hung in the kernel keeps its
// sockets open, so only its silence tells: describe_silent() names the peers not heard from
// for a while, for the message of a call that timed out (before, it said every peer was
// alive and blamed nobody). When a peer's process dies (SIGKILL, a crash, the OOM killer)
// its kernel closes the socket and a background thread notices at once, so a collective
// that fails or times out can name the rank that went away, not only the neighbour that
// happened to report it. (Gloo reports a closed connection only to the operations waiting
// on that very pair; NCCL reports nothing before its timeout.)
//
// The connections are made through the store: each rank listens on a free port of `host`,
// publishes "host:port" under <prefix>/live/<rank>, connects to every lower rank and accepts
// every higher one.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/net_util.h"
#include "distributed/store.h"

namespace rt::dist {

class PeerLiveness {
 public:
  using Clock = std::chrono::steady_clock;

  // Throws rt::Error naming the ranks that did not connect within `timeout`.
  PeerLiveness(Store& store, const std::string& prefix, int rank, int world, const std::string& host,
               Millis timeout);
  // Says goodbye to every peer (so they do not report this rank as lost), unless destroyed
  // while an exception unwinds (this rank failed: its peers report it lost at once), and
  // stops the thread. Never throws.
  ~PeerLiveness();
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  struct Loss {
    int rank;
    Clock::time_point when;  // when the closed connection was noticed
  };
  // Peers whose connection closed without a goodbye, in the order noticed. Looks at the
  // sockets first; when none is lost yet, keeps looking for up to `grace`: a process that
  // dies closes its sockets one by one, so the connection an error came through can close
  // a moment before this one.
  std::vector<Loss> lost(Millis grace = Millis(0));
  // "rank 3 (its connection closed 0.1 s ago: the process exited or was killed)", one
  // clause per lost rank joined by "; ", or "" when every peer is alive.
  std::string describe_lost(Millis grace = Millis(0));
  // "rank 1 (its process is alive but sent nothing for 4.0 s: stopped, e.g. by SIGSTOP or a
  // debugger, or hung)", one clause per open peer not heard from for `after`, or "".
  std::string describe_silent(Millis after = std::chrono::seconds(3));
  // Called (from the liveness thread, or from lost()) each time a peer is found lost, so
  // that transfers waiting on that peer can be aborted at once
  // (Note [Aborting waits on a lost peer] in gloo_communicator.cc). Must not call back into
  // this object.
  void on_loss(std::function<void()> f);
  // Asks every open peer for its stacks (a call timed out here); each peer's thread calls its
  // on_stacks_request callback once it reads the request
  // (Note [Stacks of a rank without ringtape's launcher] in distributed/stack_dump.h).
  void ask_for_stacks();
  // `f(from)`: peer `from` asked. Called from the liveness thread; must not call back into this object.
  void on_stacks_request(std::function<void(int from)> f);

 private:
  struct Peer {
    int rank;
    net::Fd fd;
    bool open = true;
    Clock::time_point last_heard = Clock::now();  // its last heartbeat (or any byte)
  };
  void connect_all(Store& store, const std::string& prefix, const std::string& host, Millis timeout);
  // Reads what arrived; notes closes; true when a peer was newly lost. Needs mu_.
  bool poll_peers(int timeout_ms);
  void notify_loss();  // calls on_loss_; without mu_
  void loop();

  int rank_, world_;
  std::mutex mu_;
  std::vector<Peer> peers_;
  std::vector<Loss> lost_;
  std::function<void()> on_loss_;  // guarded by mu_
  std::function<void(int)> on_stacks_;  // guarded by mu_
  std::vector<int> stacks_asked_by_;    // guarded by mu_: requests read, not yet answered
  net::Fd wake_;  // eventfd: the destructor's signal to the thread
  std::thread thread_;
};

// The address this machine uses to reach `remote` (the source address of the route to it,
// found by connecting a UDP socket, which sends nothing). "127.0.0.1" for a loopback remote.
// Ranks listen there so that peers on other machines can connect. Throws rt::Error when
// `remote` does not resolve.
std::string local_address_toward(const std::string& remote);

}  // namespace rt::dist
