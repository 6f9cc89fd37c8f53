// Ranks meeting through the store, as real processes with torchrun's environment: all
// arrive; some never do (the others name them); rank 0 never does; disagreeing world sizes.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "distributed/rendezvous.h"
#include "base/error.h"
#include "tests/distributed/launch.h"
#include "tests/distributed/test_errors.h"

namespace rt::dist {
namespace {

using namespace std::chrono_literals;

using testing::error_of;

TEST_CASE("rendezvous: 3 processes meet, twice, and share the store") {
  const auto r = testing::launch(3, [](int rank) {
    if (rank == 2) std::this_thread::sleep_for(200ms);  // a late rank is waited for
    RendezvousStore rs = connect_store(launch_env_from_process(), 5s);
    RT_CHECK((rank == 0) == bool(rs.server), "only rank 0 hosts");
    rs.store->add("sum", rank + 1);
    join(*rs.store, rank, 3, 5s);  // a barrier: every add is in
    const int64_t sum = rs.store->add("sum", 0);
    RT_CHECK(sum == 6, "sum ", sum);
    join(*rs.store, rank, 3, 5s);  // nobody needs rank 0's server any more
    return 0;
  });
  INFO(r.report());
  CHECK(r.ok());
}

TEST_CASE("rendezvous: ranks that never arrive are named by the others") {
  const auto r = testing::launch(4, [](int rank) {
    if (rank >= 2) return 0;  // started, but never joins
    try {
      connect_store(launch_env_from_process(), 1s);
    } catch (const Error& e) {
      std::printf("%s\n", e.what());  // rank 0 exits at once, taking the store with it
      return 7;
    }
    return 0;
  });
  INFO(r.report());
  for (int rank : {0, 1}) {
    CHECK(r.ranks[rank].exit_code == 7);
    CHECK(r.ranks[rank].output.find("rendezvous: ranks 2, 3 of 4 did not arrive within 1.0 s (this is rank " +
                                    std::to_string(rank) + ")") != std::string::npos);
    CHECK(r.ranks[rank].output.find("torchrun --nproc-per-node") != std::string::npos);
  }
  CHECK(r.seconds < 5);
}

TEST_CASE("rendezvous: no rank 0 means no store, named with its address") {
  LaunchEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.local_world_size = 2;
  env.local_rank = 1;
  env.master_port = testing::free_port();
  const std::string msg = error_of([&] { connect_store(env, 300ms); });
  INFO(msg);
  CHECK(msg.find("rendezvous (rank 1 of 2): TcpStore: cannot connect to 127.0.0.1:" +
                 std::to_string(env.master_port)) != std::string::npos);
  CHECK(msg.find("Rank 0 hosts the store") != std::string::npos);
}

TEST_CASE("rendezvous: one process gets a store of its own on a free port") {
  RendezvousStore rs = connect_store(parse_launch_env({}), 2s);
  REQUIRE(rs.server);
  CHECK(rs.server->port() > 0);
  CHECK(rs.store->add("k", 2) == 2);
}

TEST_CASE("rendezvous: ranks that disagree on the world size are told") {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore a("127.0.0.1", server.port()), b("127.0.0.1", server.port());
  auto zero = std::async(std::launch::async, [&] { return error_of([&] { join(a, 0, 3, 500ms); }); });
  const std::string one = error_of([&] { join(b, 1, 2, 2s); });
  CHECK(one.find("rendezvous: rank 0 has world size 3 but this rank (1) has 2") != std::string::npos);
  CHECK(zero.get().find("rendezvous: rank 2 of 3 did not arrive") != std::string::npos);
  CHECK(error_of([&] { join(a, 3, 3, 1s); }).find("rank 3 of 3 is not a rank") != std::string::npos);
}

TEST_CASE("rendezvous: many missing ranks make one line") {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore s("127.0.0.1", server.port());
  for (int r : {1, 2, 3, 4, 5, 7, 9, 10}) s.set("rendezvous/1/" + std::to_string(r), {'6', '4'});
  const std::string msg = error_of([&] { join(s, 0, 64, 100ms); });
  INFO(msg);
  CHECK(msg.find("rendezvous: ranks 6, 8, 11-63 of 64 did not arrive") != std::string::npos);
}

}  // namespace
}  // namespace rt::dist
