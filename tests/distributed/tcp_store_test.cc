// The TCP store over real sockets on 127.0.0.1: in one process (clients on threads) for the
// protocol's corners, and across 2-4 forked processes for what ranks do: rank 0 hosts, all
// connect, set/get/wait/add/check. Errors must name keys, ports, pids and addresses.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>

#include "distributed/net_util.h"
#include "distributed/tcp_store.h"
#include "base/error.h"
#include "tests/distributed/launch.h"
#include "tests/distributed/test_errors.h"

namespace rt::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::error_of;

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

int env_int(const char* name) { return std::atoi(std::getenv(name)); }

TEST_CASE("store: set, get, wait, add and check on one server") {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore a("127.0.0.1", server.port(), 2s), b("127.0.0.1", server.port(), 2s);
  a.set("x", bytes("hello"));
  CHECK(text(b.get("x", 0ms)) == "hello");
  a.set("x", bytes(""));  // overwrite, with an empty value
  CHECK(b.get("x", 0ms).empty());
  CHECK(b.check({"x"}));
  CHECK_FALSE(b.check({"x", "y"}));
  CHECK(b.check({}));
  CHECK(a.add("n", 5) == 5);
  CHECK(b.add("n", -7) == -2);
  CHECK(text(a.get("n", 0ms)) == "-2");  // counters are decimal text
  const Bytes binary = {0, 255, 10, 0, 13};
  b.set(std::string("k\0ey", 4), binary);
  CHECK(a.get(std::string("k\0ey", 4), 0ms) == binary);

  // A blocked get is answered by another client's set, not by its timeout.
  const auto start = Clock::now();
  auto waiter = std::async(std::launch::async, [&] { return text(b.get("late", 5s)); });
  std::this_thread::sleep_for(100ms);
  a.set("late", bytes("v"));
  CHECK(waiter.get() == "v");
  CHECK(Clock::now() - start < 2s);
  // wait() on several keys, the last supplied by add().
  auto all = std::async(std::launch::async, [&] { b.wait({"x", "late", "counter"}, 5s); });
  std::this_thread::sleep_for(50ms);
  a.add("counter", 1);
  all.get();
}

TEST_CASE("store: 32 clients parked at once are all answered by one set") {
  TcpStoreServer server("127.0.0.1", 0);
  std::vector<std::unique_ptr<TcpStore>> clients;
  std::vector<std::future<std::string>> waits;
  for (int i = 0; i < 32; ++i) {
    clients.push_back(std::make_unique<TcpStore>("127.0.0.1", server.port(), 2s));
    TcpStore* c = clients.back().get();
    waits.push_back(std::async(std::launch::async, [c] { return text(c->get("go", 5s)); }));
  }
  std::this_thread::sleep_for(100ms);
  const auto start = Clock::now();
  TcpStore("127.0.0.1", server.port(), 2s).set("go", bytes("now"));
  for (auto& w : waits) CHECK(w.get() == "now");
  CHECK(Clock::now() - start < 1s);
}

TEST_CASE("store: a timeout names the missing keys and the time waited") {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore s("127.0.0.1", server.port(), 2s);
  s.set("b", bytes("1"));
  const auto start = Clock::now();
  const std::string msg = error_of([&] { s.wait({"a", "b", "c"}, 200ms); });
  CHECK(Clock::now() - start >= 200ms);
  CHECK(msg.find("keys 'a', 'c' were not set within 0.2 s") != std::string::npos);
  CHECK(msg.find("'b'") == std::string::npos);
  CHECK(msg.find("127.0.0.1:" + std::to_string(server.port())) != std::string::npos);
  CHECK(error_of([&] { s.get("nope", 0ms); }).find("key 'nope' was not set") != std::string::npos);
  // The connection is still good after a timeout.
  CHECK(text(s.get("b", 0ms)) == "1");
}

TEST_CASE("store: add on a value that is not an integer explains itself") {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore s("127.0.0.1", server.port(), 2s);
  s.set("word", bytes("abc"));
  CHECK(error_of([&] { s.add("word", 1); }).find("key 'word' holds 3 bytes that are not an integer") !=
        std::string::npos);
  s.add("big", INT64_MAX);
  CHECK(error_of([&] { s.add("big", 1); }).find("overflows int64") != std::string::npos);
  CHECK(s.add("big", 0) == INT64_MAX);  // still usable
}

TEST_CASE("store: a port in use names the port, the holding process and the fix") {
  net::Fd holder = net::listen_tcp("127.0.0.1", 0);
  const int port = net::local_port(holder.get());
  const std::string msg = error_of([&] { TcpStoreServer("127.0.0.1", port); });
  INFO(msg);
  CHECK(msg.find("port " + std::to_string(port) + " is already in use") != std::string::npos);
  CHECK(msg.find("pid " + std::to_string(getpid()) + " (") != std::string::npos);
  CHECK(msg.find("MASTER_PORT=<n>") != std::string::npos);
  // Not torchrun's flag (the hint once named "torchrun --master-port").
  CHECK(msg.find("another master port (MASTER_PORT=<n>") != std::string::npos);
  CHECK(msg.find("torchrun --master-port") == std::string::npos);
  // Every interface includes 127.0.0.1: the same answer.
  CHECK(error_of([&] { TcpStoreServer("", port); }).find("pid " + std::to_string(getpid())) != std::string::npos);
}

TEST_CASE("store: no server names host:port, the time spent and the last error") {
  const int port = testing::free_port();
  const auto start = Clock::now();
  const std::string msg = error_of([&] { TcpStore("127.0.0.1", port, 300ms); });
  CHECK(Clock::now() - start >= 300ms);
  CHECK(Clock::now() - start < 2s);
  INFO(msg);
  CHECK(msg.find("cannot connect to 127.0.0.1:" + std::to_string(port) + " within 0.3 s") != std::string::npos);
  CHECK(msg.find("Connection refused") != std::string::npos);
  CHECK(msg.find("MASTER_ADDR") != std::string::npos);
}

TEST_CASE("store: a server that goes away fails its clients at once, naming it") {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
  const std::string where = "127.0.0.1:" + std::to_string(server->port());
  TcpStore s("127.0.0.1", server->port(), 2s);
  auto parked = std::async(std::launch::async, [&] { return error_of([&] { s.wait({"never"}, 30s); }); });
  std::this_thread::sleep_for(100ms);
  const auto start = Clock::now();
  server.reset();  // joins its thread with a client parked in a wait
  const std::string msg = parked.get();
  CHECK(Clock::now() - start < 1s);
  INFO(msg);
  CHECK(msg.find("TcpStore wait on " + where + ": the connection was closed") != std::string::npos);
  CHECK(msg.find("rank 0 exited or crashed") != std::string::npos);
  CHECK(error_of([&] { s.set("k", {}); }).find("the connection failed earlier") != std::string::npos);
}

TEST_CASE("store: a client speaking another protocol is dropped, the others are served") {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore good("127.0.0.1", server.port(), 2s);
  for (const std::string& junk : {std::string("GET / HTTP/1.1\r\n\r\n"), std::string("\xff\xff\xff\xff", 4)}) {
    net::Fd bad = net::connect_tcp("127.0.0.1", server.port(), 1s);
    REQUIRE(net::send_all(bad.get(), junk.data(), junk.size(), Clock::now() + 1s) == net::Io::ok);
    char c;
    CHECK(net::recv_all(bad.get(), &c, 1, Clock::now() + 1s) == net::Io::closed);
  }
  CHECK(good.add("still", 1) == 1);
}

// What every rank does: rank 0 hosts, all connect, write, count, read each other's keys.
int store_ranks(int rank) {
  const int world = env_int("WORLD_SIZE"), port = env_int("MASTER_PORT");
  std::unique_ptr<TcpStoreServer> server;
  if (rank == 0) server = std::make_unique<TcpStoreServer>(std::getenv("MASTER_ADDR"), port);
  TcpStore s(std::getenv("MASTER_ADDR"), port, 5s);
  s.set("rank/" + std::to_string(rank), bytes(std::to_string(rank * 10)));
  for (int i = 0; i < 50; ++i) s.add("count", 1);
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("rank/" + std::to_string(r));
  s.wait(keys, 5s);
  RT_CHECK(s.check(keys), "check after wait");
  for (int r = 0; r < world; ++r) RT_CHECK(text(s.get(keys[r], 0ms)) == std::to_string(r * 10), "rank ", r, "'s value");
  // The last rank to finish its adds says so.
  if (s.add("finished", 1) == world) s.set("all finished", {});
  s.wait({"all finished"}, 5s);
  const int64_t count = s.add("count", 0);
  RT_CHECK(count == 50 * world, "count ", count, ", expected ", 50 * world);
  // Rank 0's server must outlive every rank's last request.
  if (s.add("left", 1) == world) s.set("all left", {});
  if (rank == 0) s.wait({"all left"}, 5s);
  return 0;
}

TEST_CASE("store: 2, 3 and 4 processes set, add, wait and read each other's keys") {
  for (int world : {2, 3, 4}) {
    const auto r = testing::launch(world, store_ranks);
    INFO(r.report());
    CHECK(r.ok());
  }
}

TEST_CASE("store: ranks that start before rank 0 keep trying until it listens") {
  const auto r = testing::launch(
      3,
      [](int rank) {
        if (rank == 0) std::this_thread::sleep_for(400ms);
        return store_ranks(rank);
      });
  INFO(r.report());
  CHECK(r.ok());
}

}  // namespace
}  // namespace rt::dist
