// Failures of the Gloo backend across real processes: a rank SIGKILLed in the middle of
// all-reduces makes every other rank fail, naming it, well within the timeout; a rank that
// is alive but never joins makes the call time out, naming the operation, the time and
// (for our algorithms) the rank waited for; misuse is refused with messages that say what
// to do. Every launch has a hard wall-clock limit (tests/distributed/launch.h): nothing hangs.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/distributed/communicator_test_util.h"
#include "tests/distributed/launch.h"

namespace rt::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::int_tensor;

constexpr auto kTimeout = 5s;
constexpr int kVictim = 2;

testing::LaunchOptions within(std::chrono::milliseconds limit) {
  testing::LaunchOptions o;
  o.limit = limit;
  return o;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// All-reduces back to back; the victim kills itself (SIGKILL) from another thread while
// they run. Survivors must throw; returning means nobody noticed.
int all_reduce_until_killed(int rank, AllReduceAlgo algo) {
  CommOptions o;
  o.timeout = kTimeout;
  testing::GlooRank g(o);
  Communicator& c = g.comm();
  c.barrier().wait();
  if (rank == kVictim)
    std::thread([] {
      std::this_thread::sleep_for(300ms);
      raise(SIGKILL);
    }).detach();
  Tensor x = int_tensor(rank, 1 << 20, DType::f32);
  const auto start = Clock::now();
  while (Clock::now() - start < 3s) c.all_reduce(x, ReduceOp::max, algo).wait();
  return 3;
}

TEST_CASE("gloo: a rank killed mid-collective makes every other rank fail within its timeout, naming it") {
  for (AllReduceAlgo algo : {AllReduceAlgo::library, AllReduceAlgo::ring, AllReduceAlgo::tree}) {
    const auto r = testing::launch(4, [algo](int rank) { return all_reduce_until_killed(rank, algo); }, within(15s));
    INFO(algo_name(algo), ": ", r.report());
    CHECK(r.hung().empty());
    CHECK(r.ranks[kVictim].signal == SIGKILL);
    for (const auto& rr : r.ranks) {
      if (rr.rank == kVictim) continue;
      CHECK_MESSAGE(rr.exit_code == 1, "rank ", rr.rank, " exit ", rr.exit_code);
      CHECK_MESSAGE(has(rr.output, "lost rank 2 ("), "rank ", rr.rank, " does not name the lost rank");
      CHECK_MESSAGE(has(rr.output, std::string("all_reduce #")), "rank ", rr.rank, " does not name the operation");
      CHECK_MESSAGE(has(rr.output, " failed after "), "rank ", rr.rank, " does not say how long it ran");
    }
    // The victim dies 0.3 s in; everyone must be out long before the 5 s timeout would end it.
    CHECK(r.seconds < 0.3 + std::chrono::duration<double>(kTimeout).count());
  }
}

// Rank 0 waits to receive from rank 1, which is alive but silent, while rank 2 is
// SIGKILLed 0.3 s in. Gloo fails only the transfers on the connection that closed, so
// rank 0's wait would last the whole timeout; a dead rank means the job cannot go on, so
// the liveness links end every wait at once (Note [Aborting waits on a lost peer]).
int wait_on_silent_peer_while_another_dies(int rank) {
  CommOptions o;
  o.timeout = kTimeout;
  testing::GlooRank g(o);
  Communicator& c = g.comm();
  c.barrier().wait();
  if (rank == 2) {
    std::this_thread::sleep_for(300ms);
    raise(SIGKILL);
  }
  if (rank == 1) {
    std::this_thread::sleep_for(kTimeout + 1s);
    return 0;
  }
  Tensor x = int_tensor(rank, 1000, DType::f32);
  const auto start = Clock::now();
  try {
    c.recv(x, 1).wait();
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    RT_CHECK(has(e.what(), "lost rank 2 ("), "message: ", e.what());
    RT_CHECK(s < 2.0, "the receive failed after ", s, " s instead of soon after rank 2 died; message: ", e.what());
    return 0;
  }
  return 3;
}

TEST_CASE("gloo: a rank's death ends every wait at once, even on another rank's connection") {
  const auto r = testing::launch(3, wait_on_silent_peer_while_another_dies, within(20s));
  INFO(r.report());
  CHECK(r.hung().empty());
  CHECK(r.ranks[2].signal == SIGKILL);
  CHECK(r.ranks[0].exit_code == 0);
}

// As above, but rank 1 fails with an exception instead of dying: its communicator is
// destroyed while the exception unwinds and the process lives on (as one that reports its
// error). Rank 0, waiting on silent rank 2, must name rank 1 at once. Before the fix the
// failing rank said goodbye as if it had finished in order, so rank 0 waited out its whole
// timeout and then reported every peer's process alive.
int wait_on_silent_peer_while_another_fails(int rank) {
  CommOptions o;
  o.timeout = kTimeout;
  if (rank == 1) {
    try {
      testing::GlooRank g(o);
      g.comm().barrier().wait();
      std::this_thread::sleep_for(300ms);
      throw Error("rank 1 fails");
    } catch (const Error&) {
    }
    std::this_thread::sleep_for(kTimeout + 1s);
    return 0;
  }
  testing::GlooRank g(o);
  Communicator& c = g.comm();
  c.barrier().wait();
  if (rank == 2) {
    std::this_thread::sleep_for(kTimeout + 1s);
    return 0;
  }
  Tensor x = int_tensor(rank, 1000, DType::f32);
  const auto start = Clock::now();
  try {
    c.recv(x, 2).wait();
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    RT_CHECK(has(e.what(), "lost rank 1 ("), "message: ", e.what());
    RT_CHECK(s < 2.0, "the receive failed after ", s, " s instead of soon after rank 1 failed; message: ", e.what());
    return 0;
  }
  return 3;
}

TEST_CASE("gloo: a rank that fails with an exception is named at once, not after the timeout") {
  const auto r = testing::launch(3, wait_on_silent_peer_while_another_fails, within(20s));
  INFO(r.report());
  CHECK(r.hung().empty());
  CHECK(r.ranks[0].exit_code == 0);
}

// Rank 1 is alive but never calls; rank 0's call times out.
int silent_peer(int rank, AllReduceAlgo algo) {
  CommOptions o;
  o.timeout = 10s;
  testing::GlooRank g(o);
  Communicator& c = g.comm();
  if (rank == 1) {
    std::this_thread::sleep_for(1500ms);
    return 0;
  }
  Tensor x = int_tensor(rank, 1000, DType::f32);
  const auto start = Clock::now();
  std::string msg = "(no error)";
  try {
    c.all_reduce(x, ReduceOp::sum, algo, 400ms).wait();
  } catch (const Error& e) {
    msg = e.what();
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  RT_CHECK(has(msg, "timed out (timeout 0.4 s)"), "message: ", msg);
  RT_CHECK(has(msg, detail::cat("all_reduce #0 (", algo_name(algo), ", sum, f32 x 1000)")), "message: ", msg);
  RT_CHECK(algo == AllReduceAlgo::library || has(msg, "waiting for rank 1"), "message: ", msg);
  RT_CHECK(s >= 0.39 && s < 1.4, "timed out after ", s, " s instead of about 0.4 s");
  // The communicator is broken for good, and says why.
  try {
    c.barrier().wait();
    msg = "(no error)";
  } catch (const Error& e) {
    msg = e.what();
  }
  RT_CHECK(has(msg, "barrier #1 not run: this communicator failed earlier: "), "message: ", msg);
  return 0;
}

// Rank 1 stops (SIGSTOP) with its sockets open (Note [Silent peers]). Before, rank 0's
// timeout said every peer's process was alive and named nobody.
int stopped_peer(int rank) {
  CommOptions o;
  o.timeout = 10s;
  testing::GlooRank g(o);
  Communicator& c = g.comm();
  if (rank == 1) raise(SIGSTOP);  // killed at the launch's limit
  Tensor x = int_tensor(rank, 1000, DType::f32);
  std::string msg = "(no error)";
  try {
    c.all_reduce(x, ReduceOp::sum, AllReduceAlgo::library, 4s).wait();
  } catch (const Error& e) {
    msg = e.what();
  }
  RT_CHECK(has(msg, "timed out (timeout 4.0 s)"), "message: ", msg);
  RT_CHECK(has(msg, "not taking part: rank 1 (its process is alive but sent nothing for"), "message: ", msg);
  RT_CHECK(has(msg, "stopped, e.g. by SIGSTOP or a debugger, or hung"), "message: ", msg);
  return 0;
}

TEST_CASE("gloo: a stopped peer (SIGSTOP) is named when the call times out") {
  const auto r = testing::launch(2, stopped_peer, within(9s));
  INFO(r.report());
  CHECK(r.ranks[0].exit_code == 0);
  CHECK(r.hung() == std::vector<int>{1});
}

TEST_CASE("gloo: a peer that never joins makes the call time out, naming the operation and the time") {
  for (AllReduceAlgo algo : {AllReduceAlgo::library, AllReduceAlgo::ring}) {
    const auto r = testing::launch(2, [algo](int rank) { return silent_peer(rank, algo); }, within(20s));
    INFO(algo_name(algo), ": ", r.report());
    CHECK(r.ranks[0].exit_code == 0);
    CHECK(r.hung().empty());
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// One rank (world 1): every call works, and misuse is refused at the call.
int one_rank(int) {
  testing::GlooRank g;
  Communicator& c = g.comm();
  Tensor x = int_tensor(0, 10, DType::f64);
  for (AllReduceAlgo a : {AllReduceAlgo::library, AllReduceAlgo::ring, AllReduceAlgo::tree}) {
    c.all_reduce(x, ReduceOp::avg, a).wait();
    testing::expect_equal(x, int_tensor(0, 10, DType::f64).to_vector<double>(), "world 1 all_reduce");
  }
  Tensor out = Tensor::zeros({10}, DType::f64);
  c.all_gather(out, x).wait();
  c.reduce_scatter(out, x).wait();
  c.broadcast(x, 0).wait();
  c.barrier().wait();
  testing::expect_equal(out, x.to_vector<double>(), "world 1 all_gather / reduce_scatter");

  struct Case {
    std::function<void()> call;
    std::string says;
  } cases[] = {
      {[&] { c.all_reduce(Tensor::zeros({4}, DType::bf16)).wait(); }, "reduces f32 and f64, not bf16"},
      {[&] { c.all_reduce(Tensor::zeros({4}, DType::i64)).wait(); }, "reduces floating tensors only"},
      {[&] { c.all_gather(Tensor::zeros({5}), Tensor::zeros({3})).wait(); }, "it needs world size (1) x 3 = 3"},
      {[&] { c.broadcast(x, 5).wait(); }, "root 5 is not a rank of this world of 1"},
      {[&] { c.all_reduce(x, ReduceOp::sum, AllReduceAlgo::ring, 0ms).wait(); }, "timeout must be positive"},
      {[&] { c.send(x, 0).wait(); }, "cannot send to itself"},
      {[&] { c.all_reduce(Tensor()).wait(); }, "all_reduce"},
  };
  for (const Case& k : cases) {
    const std::string msg = error_of(k.call);
    RT_CHECK(has(msg, k.says), "expected an error saying '", k.says, "', got: ", msg);
  }
  return 0;
}

TEST_CASE("gloo: one rank works alone, and misuse is refused with what to do") {
  const auto r = testing::launch(1, one_rank, within(20s));
  INFO(r.report());
  CHECK(r.ok());
}

TEST_CASE("the all-reduce algorithm is chosen by name; anything else lists the choices") {
  CHECK(parse_allreduce_algo("library") == AllReduceAlgo::library);
  CHECK(parse_allreduce_algo("ring") == AllReduceAlgo::ring);
  CHECK(parse_allreduce_algo("tree") == AllReduceAlgo::tree);
  const std::string msg = error_of([] { parse_allreduce_algo("Ring"); });
  CHECK_MESSAGE(has(msg, "unknown all-reduce algorithm 'Ring': choose one of library"), msg);
  CHECK_MESSAGE(has(msg, "ring or tree"), msg);
}

}  // namespace
}  // namespace rt::dist
