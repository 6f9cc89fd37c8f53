#include "distributed/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "distributed/net_util.h"
#include "base/error.h"

namespace rt::dist {

using net::Clock;

namespace {

// "rank 2" / "ranks 2, 3" / "ranks 0, 4-9, 12": runs of three or more collapse to a range,
// and the list stops after 20 items, so a thousand missing ranks stay one line.
std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  size_t items = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (items == 20) {
      s += " and " + std::to_string(ranks.size() - i) + " more";
      break;
    }
    s += items++ ? ", " : "";
    if (j - i >= 2) {
      s += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
      i = j + 1;
    } else {
      s += std::to_string(ranks[i++]);
    }
  }
  return s;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

namespace {

Millis left(Clock::time_point start, Millis timeout) {
  return std::max(Millis(0), timeout - std::chrono::duration_cast<Millis>(Clock::now() - start));
}

// Waits for keys[r] of every rank r ("" for a rank not waited for). "" when all are set;
// on timeout, what to tell: "ranks 2, 3 of 4 did not <verb> within 30.0 s".
std::string wait_for_ranks(Store& store, const std::vector<std::string>& keys, Clock::time_point start,
                           Millis timeout, const char* verb) {
  std::vector<std::string> wanted;
  for (const auto& k : keys)
    if (!k.empty()) wanted.push_back(k);
  try {
    store.wait(wanted, left(start, timeout));
    return "";
  } catch (const Error& e) {
    // The store says which keys; ranks are what the user knows. If the store itself is gone
    // the first error says so and is the one to report.
    const std::string first = e.what();
    std::vector<int> missing;
    try {
      for (size_t r = 0; r < keys.size(); ++r)
        if (!keys[r].empty() && !store.check({keys[r]})) missing.push_back(int(r));
    } catch (const Error&) {
      RT_FAIL(first);
    }
    RT_CHECK(!missing.empty(), first);  // all there now: the error was not about them
    return detail::cat(ranks_text(missing), " of ", keys.size(), " did not ", verb, " within ",
                       net::seconds(Clock::now() - start));
  }
}

[[noreturn]] void fail(const std::string& what, int rank, int world) {
  RT_FAIL("rendezvous: ", what, " (this is rank ", rank,
          "). Every rank must be started and reach the rendezvous with the same MASTER_ADDR, MASTER_PORT and "
          "WORLD_SIZE: check that all ",
          world, " processes were launched (torchrun --nproc-per-node, srun -n), that the missing ones did not fail "
                 "first (their logs), or raise the timeout if they start late");
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

// "pid 123 on node7".
std::string this_process() { return "pid " + std::to_string(getpid()) + " on " + net::host_name(); }

// Note [Rank claims]
// A store belongs to one job, and each rank of it joins once. Before its first join a rank
// claims its number (an atomic add on the store): only the first claim of a number wins. A
// process that reaches a store where its rank is taken (a second job started on a running
// job's MASTER_PORT, whose rank 0 failed to bind but whose other ranks connected; or two
// processes started with one RANK) fails at once, naming the holder, and has changed nothing
// the job reads: before, its join counted as the running job's next barrier, which then
// waited out --timeout at its end and failed.
void claim_rank(Store& store, int rank, const std::string& where) {
  const std::string key = "rendezvous/claims/" + std::to_string(rank), holder = key + "/holder";
  if (store.add(key, 1) == 1) {
    store.set(holder, text(this_process()));
    return;
  }
  std::string who = "another process";
  try {
    const Bytes h = store.get(holder, Millis(2000));
    who = std::string(h.begin(), h.end());
  } catch (const Error&) {
  }
  RT_FAIL("rendezvous: rank ", rank, " of the job whose store is at ", where, " is already taken (by ", who,
          "): another job runs with this MASTER_ADDR:MASTER_PORT (give this one another master port: "
          "MASTER_PORT under torchrun or srun), or two processes were started with RANK=", rank,
          " (start each rank once)");
}

}  // namespace

// Note [The last barrier]
// A program ends with a join() and rank 0 exits, taking the store with it; so no rank may
// send a request after the one that lets rank 0's join return. Every rank announces itself
// ("arrived"). Rank 0 waits for all and posts the verdict: "ok", or which ranks did not
// come, so that the others name them too even though rank 0's failure closes the store. The
// others read rank 0's announcement (the world sizes must agree), wait for the verdict, and,
// as their last request, say "done"; rank 0 returns only when every "done" is in. The server
// answers that last SET in the same pass as rank 0's wait, so the answer is on its way
// before rank 0 can exit.
void join(Store& store, int rank, int world, Millis timeout) {
  RT_CHECK(world >= 1 && rank >= 0 && rank < world, "rendezvous: rank ", rank, " of ", world,
           " is not a rank (0..world-1 of a world of at least 1)");
  const auto start = Clock::now();
  // The n-th join of every rank meets under its own prefix, so a second join (a barrier)
  // does not pass on the first one's keys.
  const int64_t generation = store.add("rendezvous/joins/" + std::to_string(rank), 1);
  const std::string prefix = "rendezvous/" + std::to_string(generation) + "/";
  const std::string world_text = std::to_string(world), verdict = prefix + "verdict";
  std::vector<std::string> arrived, done;
  for (int r = 0; r < world; ++r) {
    arrived.push_back(prefix + std::to_string(r));
    done.push_back(r == 0 ? "" : prefix + "done/" + std::to_string(r));  // rank 0 has no "done"
  }
  store.set(arrived[rank], text(world_text));
  if (rank == 0) {
    const std::string late = wait_for_ranks(store, arrived, start, timeout, "arrive");
    store.set(verdict, text(late.empty() ? "ok" : late));
    if (!late.empty()) fail(late, rank, world);
    const std::string unfinished = wait_for_ranks(store, done, Clock::now(), timeout, "finish the rendezvous");
    if (!unfinished.empty()) fail(unfinished, rank, world);
    return;
  }
  // A timed-out get: if ranks are missing, name them; else rank 0 is about to answer (it
  // started later than this rank), so wait once more.
  auto get_or_name_missing = [&](const std::string& key, Millis wait) {
    try {
      return store.get(key, wait);
    } catch (const Error&) {
      const std::string late = wait_for_ranks(store, arrived, start, Millis(0), "arrive");
      if (!late.empty()) fail(late, rank, world);
      return store.get(key, timeout);
    }
  };
  const Bytes zero = get_or_name_missing(arrived[0], timeout);
  const std::string zero_world(zero.begin(), zero.end());
  RT_CHECK(zero_world == world_text, "rendezvous: rank 0 has world size ", clip_for_message(zero_world),
           " but this rank (", rank, ") has ", world, ": every rank must get the same WORLD_SIZE");
  // Rank 0 started its wait about when this rank did; give its verdict, which names the
  // missing ranks even after rank 0 exits, a moment to come before asking the store.
  const Millis grace = std::min<Millis>(timeout, std::chrono::seconds(5));
  const Bytes said = get_or_name_missing(verdict, left(start, timeout) + grace);
  const std::string verdict_text(said.begin(), said.end());
  if (verdict_text != "ok") fail(verdict_text, rank, world);
  store.set(done[rank], {});  // the last request (Note [The last barrier])
}

RendezvousStore connect_store(const LaunchEnv& env, Millis timeout) {
  const auto start = Clock::now();
  RendezvousStore rs;
  std::string addr = env.master_addr;
  int port = env.master_port;
  if (env.world_size == 1) addr = "127.0.0.1";  // nobody else needs to reach it
  if (env.rank == 0) {
    rs.server = std::make_unique<TcpStoreServer>(is_loopback(addr) ? addr : "", port);
    port = rs.server->port();  // MASTER_PORT=0 with one process: the port it got
  }
  try {
    rs.store = std::make_unique<TcpStore>(addr, port, timeout);
  } catch (const Error& e) {
    RT_FAIL("rendezvous (rank ", env.rank, " of ", env.world_size, "): ", e.what());
  }
  if (env.world_size > 1) claim_rank(*rs.store, env.rank, net::endpoint(addr, port));
  const auto left = std::max(Millis(0), timeout - std::chrono::duration_cast<Millis>(Clock::now() - start));
  join(*rs.store, env.rank, env.world_size, left);
  return rs;
}

}  // namespace rt::dist
