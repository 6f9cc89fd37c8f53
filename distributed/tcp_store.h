// The project's own TCP key-value store (Debian's Gloo ships none): rank 0 hosts a
// TcpStoreServer at MASTER_ADDR:MASTER_PORT, every rank (rank 0 too) talks to it through a
// TcpStore. Gloo's rendezvous and NCCL's unique id go through it.
//
// Protocol (one TCP connection per client, one request in flight; distributed/net_util.h frames):
//   request  = op:u8, then   SET key value | GET key timeout_ms:u64 | WAIT n:u64 key*n timeout_ms
//                            | ADD key delta:u64 (two's complement) | CHECK n:u64 key*n
//   reply    = status:u8 (0 ok, 1 timed out, 2 error), then
//              ok: GET value | ADD new:u64 | CHECK set:u8 | (nothing) ;
//              timed out: n:u64 missing-key*n ; error: message
// Blocking waits live in the server: a GET or WAIT whose keys are missing parks the client
// until a SET/ADD supplies them or its deadline passes (poll()'s timeout), so nobody polls.
// ADD keeps integers as decimal text, so get() of a counter reads "3".
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/net_util.h"
#include "distributed/store.h"

namespace rt::dist {

class TcpStoreServer {
 public:
  // Listens on host:port at once (host "" = every interface; port 0 = a free port, see
  // port()) and serves from a background thread. Throws rt::Error when it cannot listen;
  // a port in use is named with the process holding it and how to choose another.
  TcpStoreServer(const std::string& host, int port);
  // Stops serving, closes every connection and joins the thread. Never throws.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }

 private:
  struct State;  // the serving loop's data, touched only by its thread
  int port_;
  net::Fd wake_;  // eventfd: written by the destructor to end the loop
  std::unique_ptr<State> state_;
  std::thread thread_;
};

class TcpStore : public Store {
 public:
  // Connects to the server at host:port, retrying until `timeout` (rank 0 may start after
  // this rank). `timeout` also bounds each set/add/check's round trip; get/wait take their
  // own. Throws rt::Error naming host:port and the time spent when no server answers.
  TcpStore(const std::string& host, int port, Millis timeout = std::chrono::seconds(30));

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;

  const std::string& host() const { return host_; }
  int port() const { return port_; }

 private:
  // Sends one request and returns the ok reply's body (after the status byte). A timed-out
  // reply throws naming the missing keys; a lost connection throws and poisons the client
  // (the stream's position is unknown), so later calls fail at once with the same cause.
  std::vector<uint8_t> request(const char* op, net::FrameWriter& req, Millis wait);

  std::string host_;
  int port_;
  Millis timeout_;
  std::mutex mu_;  // one request at a time on the one connection
  net::Fd fd_;
  std::string broken_;  // why the connection is unusable; "" while it is fine
};

}  // namespace rt::dist
