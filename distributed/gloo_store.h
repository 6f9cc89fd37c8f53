// GlooStore: Gloo's rendezvous store interface over the project's rt::dist::Store (the TCP
// store rank 0 hosts), so gloo::rendezvous::Context::connectFullMesh finds its peers through
// it. Keys get `prefix` + "/gloo/" in front. Gloo's calls without a timeout use `timeout`.
#pragma once

#include <sys/socket.h>  // gloo's headers use sockaddr_storage without including it

#include <gloo/rendezvous/store.h>

#include <string>
#include <vector>

#include "distributed/store.h"

namespace rt::dist {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(rt::dist::Store& store, std::string prefix, Millis timeout)
      : store_(store), prefix_(std::move(prefix) + "/gloo/"), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  rt::dist::Store& store_;
  std::string prefix_;
  Millis timeout_;
};

}  // namespace rt::dist
