#include "distributed/launcher_rounds.h"

#include <thread>
#include <vector>

#include "base/error.h"
#include "distributed/net_util.h"

namespace rt::dist {
namespace {

using Clock = std::chrono::steady_clock;

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

bool loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

}  // namespace

LauncherRounds::LauncherRounds(const std::string& master_addr, int port, int node_rank, int nnodes,
                               std::chrono::seconds timeout)
    : master_addr_(master_addr), port_(port), node_rank_(node_rank), nnodes_(nnodes), timeout_(timeout) {
  if (node_rank == 0) server_ = std::make_unique<TcpStoreServer>(loopback(master_addr) ? master_addr : "", port);
  store_ = std::make_unique<TcpStore>(master_addr, port, std::chrono::duration_cast<Millis>(timeout));
}

LauncherRounds::~LauncherRounds() = default;

std::string LauncherRounds::endpoint() const { return net::endpoint(master_addr_, port_); }

std::string LauncherRounds::key_round(int round, int node) const {
  return "round/" + std::to_string(round) + "/node/" + std::to_string(node);
}

int LauncherRounds::first_round(std::string* cause) {
  const int64_t starts = store_->add("node/" + std::to_string(node_rank_) + "/starts", 1);
  const int round = int(store_->add("round", 0));
  if (starts == 1) return round;
  // A launcher of this node ran before. If the newest round started with it (every node joined),
  // its workers are gone from that round: ask for the next. Otherwise the others wait in it for us.
  std::vector<std::string> all;
  for (int n = 0; n < nnodes_; ++n) all.push_back(key_round(round, n));
  if (!store_->check(all)) return round;
  const std::string why = "node " + std::to_string(node_rank_) + "'s launcher was started again";
  request(round + 1, why);
  *cause = why;
  return round + 1;
}

int LauncherRounds::join(int round, std::string* cause) {
  const auto until = Clock::now() + timeout_;
  for (;;) {
    store_->set(key_round(round, node_rank_), bytes("1"));
    std::vector<std::string> all;
    for (int n = 0; n < nnodes_; ++n) all.push_back(key_round(round, n));
    if (store_->check(all)) return round;
    if (requested(round + 1, cause)) {  // someone moved on while we waited
      ++round;
      continue;
    }
    if (Clock::now() >= until)
      RT_FAIL("launcher: ", nodes_missing(round), " did not join round ", round, " within ", timeout_.count(),
              " s (--rdzv-timeout): start its launcher again with the same command, or the job ends here");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string LauncherRounds::nodes_missing(int round) {
  std::string out;
  int count = 0;
  for (int n = 0; n < nnodes_; ++n)
    if (!store_->check({key_round(round, n)})) {
      out += (count++ ? ", " : "") + std::to_string(n);
    }
  return (count == 1 ? "node " : "nodes ") + out;
}

bool LauncherRounds::requested(int next, std::string* cause) {
  try {
    const std::string key = "restart/" + std::to_string(next);
    if (!store_->check({key})) return false;
    *cause = text(store_->get(key, Millis(1000)));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

void LauncherRounds::request(int next, const std::string& cause) {
  const std::string key = "restart/" + std::to_string(next);
  // The first asker's reason stays (the others' failures follow from it), and it alone moves
  // "round" on, so that it grows by one per round however many ask.
  if (store_->add(key + "/askers", 1) != 1) return;
  const int64_t now = store_->add("round", 0);
  if (now < next) store_->add("round", next - now);
  store_->set(key, bytes(cause));
}

void LauncherRounds::set_checkpoint(int round, const std::string& path) {
  store_->set("round/" + std::to_string(round) + "/checkpoint", bytes(path));
}

std::string LauncherRounds::checkpoint(int round) {
  return text(
      store_->get("round/" + std::to_string(round) + "/checkpoint", std::chrono::duration_cast<Millis>(timeout_)));
}

void LauncherRounds::done() {
  try {
    store_->set("done/" + std::to_string(node_rank_), bytes("1"));
    if (node_rank_ != 0) return;
    std::vector<std::string> all;
    for (int n = 0; n < nnodes_; ++n) all.push_back("done/" + std::to_string(n));
    store_->wait(all, std::chrono::duration_cast<Millis>(timeout_));
  } catch (const std::exception&) {
    // A node that does not say so has ended anyway (its workers finished with ours).
  }
}

}  // namespace rt::dist
