// LauncherRounds (distributed/launcher_rounds.h; Note [Elastic restarts] in
// distributed/local_launcher.cc): the launchers of a multi-node job agreeing on restart rounds
// through node 0's store, each node's launcher a thread here with its own connection.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "distributed/launcher_rounds.h"
#include "distributed/net_util.h"
#include "tests/distributed/test_errors.h"

namespace rt::dist {
namespace {

using namespace std::chrono_literals;

int free_port() { return net::local_port(net::listen_tcp("127.0.0.1", 0).get()); }

TEST_CASE("launcher rounds: start, a failure's round, a node's launcher started again, a node that never comes") {
  const int port = free_port();
  LauncherRounds node0("127.0.0.1", port, 0, 2, 5s);  // hosts the store
  auto node1 = std::make_unique<LauncherRounds>("127.0.0.1", port, 1, 2, 5s);
  std::string cause0, cause1;

  // Both start in round 0 and meet there.
  CHECK(node0.first_round(&cause0) == 0);
  CHECK(node1->first_round(&cause1) == 0);
  auto joined1 = std::async(std::launch::async, [&] { return node1->join(0, &cause1); });
  CHECK(node0.join(0, &cause0) == 0);
  CHECK(joined1.get() == 0);

  // Node 1's rank fails: it asks for round 1; node 0 sees it with node 1's reason, and a second
  // asker's reason does not replace the first.
  CHECK_FALSE(node0.requested(1, &cause0));
  node1->request(1, "node 1: rank 3 failed (signal Killed)");
  node0.request(1, "node 0: rank 0 failed (exit status 1)");
  REQUIRE(node0.requested(1, &cause0));
  CHECK(cause0 == "node 1: rank 3 failed (signal Killed)");
  joined1 = std::async(std::launch::async, [&] { return node1->join(1, &cause1); });
  CHECK(node0.join(1, &cause0) == 1);
  CHECK(joined1.get() == 1);
  node0.set_checkpoint(1, "/runs/x/checkpoint.safetensors");
  CHECK(node1->checkpoint(1) == "/runs/x/checkpoint.safetensors");

  // Node 1's launcher is killed and started again: round 1 already began with its predecessor,
  // so it asks for round 2 itself.
  node1.reset();
  node1 = std::make_unique<LauncherRounds>("127.0.0.1", port, 1, 2, 5s);
  CHECK(node1->first_round(&cause1) == 2);
  CHECK(cause1 == "node 1's launcher was started again");
  REQUIRE(node0.requested(2, &cause0));
  CHECK(cause0 == "node 1's launcher was started again");

  // While node 0 waits in round 2, node 1 asks for round 3 and joins it: node 0 follows.
  auto joined0 = std::async(std::launch::async, [&] { return node0.join(2, &cause0); });
  node1->request(3, "node 1: rank 2 failed (exit status 1)");
  CHECK(node1->join(3, &cause1) == 3);
  CHECK(joined0.get() == 3);
  CHECK(cause0 == "node 1: rank 2 failed (exit status 1)");

  // A node that does not come: named after the timeout (a job of its own, node 0 alone).
  LauncherRounds alone("127.0.0.1", free_port(), 0, 2, 1s);
  CHECK(alone.first_round(&cause0) == 0);
  const std::string msg = testing::error_of([&] { alone.join(0, &cause0); });
  CHECK_MESSAGE(msg.find("launcher: node 1 did not join round 0 within 1 s (--rdzv-timeout)") != std::string::npos,
                msg);
}

}  // namespace
}  // namespace rt::dist
