// The rendezvous key-value store: how ranks find each other before any collective exists.
// Rank 0 hosts a TcpStore at MASTER_ADDR:MASTER_PORT (distributed/tcp_store.h); every rank, rank 0
// included, talks to it as a client. Gloo's rendezvous and NCCL's unique id go through it.
//
// Every blocking call takes a timeout and, when it runs out, throws rt::Error naming the
// keys still missing and the time waited; a store that went away throws naming its address.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace rt::dist {

using Bytes = std::vector<uint8_t>;
using Millis = std::chrono::milliseconds;

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` (overwriting), and wakes every waiter on it.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // The value of `key`, waiting up to `timeout` for it to be set.
  virtual Bytes get(const std::string& key, Millis timeout) = 0;
  // Waits until every key is set, up to `timeout` in all.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  // Atomically adds `delta` to the integer at `key` (0 when unset) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Whether every key is set, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;
};

}  // namespace rt::dist
