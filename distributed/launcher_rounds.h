// How the launchers of a multi-node job agree on restart rounds (Note [Elastic restarts] in
// distributed/local_launcher.cc): node 0's launcher hosts a store of their own at
// MASTER_ADDR:MASTER_PORT + 1 (the workers' store, rank 0's, is at MASTER_PORT and lives as
// long as one round's workers), and every launcher, node 0's included, talks to it:
//   "round"                  the newest round any launcher asked for (0 when unset)
//   "restart/R"              a launcher asks every node to move to round R; the value is why
//   "round/R/node/N"         node N's launcher joined round R
//   "round/R/checkpoint"     node 0's: the checkpoint round R resumes from ("" = none)
//   "node/N/starts"          how many times a launcher of node N started (a restarted one > 1)
//   "done/N"                 node N's workers all ended well (node 0 keeps the store until all are)
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "distributed/tcp_store.h"

namespace rt::dist {

class LauncherRounds {
 public:
  // Node 0 listens on `port` (throws naming it when it cannot); every node connects, waiting
  // up to `timeout` for node 0's launcher.
  LauncherRounds(const std::string& master_addr, int port, int node_rank, int nnodes, std::chrono::seconds timeout);
  ~LauncherRounds();

  // The round this launcher joins first: the newest one, or the next when that one started with an
  // earlier launcher of this node (this one was started again: *cause says so).
  int first_round(std::string* cause);
  // Joins `round`, waiting up to the timeout for every node's launcher; returns the round joined (a
  // later one when some launcher asked for it meanwhile, *cause then its reason). Throws rt::Error
  // naming the nodes that did not come.
  int join(int round, std::string* cause);
  // Whether a launcher asked for round `next` (setting *cause); never throws (false when the store
  // cannot be reached: a lost node 0 shows as failed workers).
  bool requested(int next, std::string* cause);
  // Asks every node to move to round `next` because of `cause` (the first reason given stays).
  void request(int next, const std::string& cause);
  // Node 0: publishes the checkpoint round `round` resumes from; the others read it.
  void set_checkpoint(int round, const std::string& path);
  std::string checkpoint(int round);
  // This node's workers ended well; node 0 waits (up to the timeout) for every node's before its
  // store goes away with it.
  void done();

  std::string endpoint() const;

 private:
  std::string key_round(int round, int node) const;
  std::string nodes_missing(int round);
  std::string master_addr_;
  int port_, node_rank_, nnodes_;
  std::chrono::seconds timeout_;
  std::unique_ptr<TcpStoreServer> server_;  // node 0's; declared first, destroyed last
  std::unique_ptr<TcpStore> store_;
};

}  // namespace rt::dist
