#include "distributed/launch_env.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

#include "distributed/net_util.h"
#include "base/error.h"

extern char** environ;

namespace rt::dist {

std::string LaunchEnv::describe() const {
  return detail::cat("rank ", rank, " of ", world_size, " (local ", local_rank, " of ", local_world_size, "), master ",
                     net::endpoint(master_addr, master_port), ", from ", source,
                     store_note.empty() ? "" : " (" + store_note + ")");
}

namespace {

const char* kFix =
    "set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun does), or start the ranks with srun";

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// The value of `name` as an int, or nothing when unset. A set but malformed value is an
// error: a typo must not silently become the default.
std::optional<int> get_int(const EnvMap& env, const std::string& name) {
  const auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  const std::string& v = it->second;
  int x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  RT_CHECK(!v.empty() && ec == std::errc() && end == v.data() + v.size(), name, "='", clip_for_message(v),
           "' is not a whole number: launchers set it to one (", kFix, ")");
  return x;
}

std::optional<std::string> get(const EnvMap& env, const std::string& name) {
  const auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// The first of `names` that is set, with its name; nothing when none is.
std::optional<std::pair<std::string, std::string>> first_of(const EnvMap& env, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto v = get(env, n)) return std::make_pair(std::string(n), *v);
  return std::nullopt;
}

// The variable each field came from, so that a bad value is named as the user set it.
struct Names {
  std::string rank, world, local_rank, local_world, addr, port;
};

void validate(const LaunchEnv& e, const Names& n) {
  RT_CHECK(e.world_size >= 1, n.world, "=", e.world_size, ": the number of processes is at least 1");
  RT_CHECK(e.rank >= 0 && e.rank < e.world_size, n.rank, "=", e.rank, " with ", n.world, "=", e.world_size,
           ": ranks are 0..", e.world_size - 1, ", one per process");
  RT_CHECK(e.local_world_size >= 1 && e.local_world_size <= e.world_size, n.local_world, "=", e.local_world_size,
           " with ", n.world, "=", e.world_size, ": a node runs 1..", e.world_size, " of the processes");
  RT_CHECK(e.local_rank >= 0 && e.local_rank < e.local_world_size, n.local_rank, "=", e.local_rank, " with ",
           n.local_world, "=", e.local_world_size, ": local ranks are 0..", e.local_world_size - 1);
  RT_CHECK(e.master_port >= 0 && e.master_port <= 65535, n.port, "=", e.master_port,
           " is not a TCP port: choose one in 1024..65535 that no other job uses");
  if (e.world_size > 1) {
    RT_CHECK(!e.master_addr.empty(), n.addr, " is not set, and ", e.world_size,
             " processes need it: the host name or address of rank 0's machine (", kFix, ")");
    RT_CHECK(e.master_port != 0, n.port, "=0 (a free port, picked by rank 0) works for one process only: with ",
             e.world_size, " the other ranks cannot learn it; choose a fixed port in 1024..65535");
  }
}

LaunchEnv from_torchrun(const EnvMap& env) {
  RT_CHECK(env.count("RANK") && env.count("WORLD_SIZE"), env.count("RANK") ? "RANK" : "WORLD_SIZE",
           " is set but ", env.count("RANK") ? "WORLD_SIZE" : "RANK", " is not: ", kFix);
  LaunchEnv e;
  e.source = "torchrun";
  e.rank = *get_int(env, "RANK");
  e.world_size = *get_int(env, "WORLD_SIZE");
  const auto local_world = get_int(env, "LOCAL_WORLD_SIZE");
  const auto local_rank = get_int(env, "LOCAL_RANK");
  RT_CHECK(local_rank || !local_world, "LOCAL_WORLD_SIZE is set but LOCAL_RANK is not: set both (torchrun does)");
  // Without them, assume one node (scripts that start every rank on one machine).
  e.local_world_size = local_world.value_or(e.world_size);
  e.local_rank = local_rank.value_or(e.rank);
  e.master_addr = get(env, "MASTER_ADDR").value_or(e.world_size > 1 ? "" : "127.0.0.1");
  e.master_port = get_int(env, "MASTER_PORT").value_or(0);
  validate(e, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"});
  // Note [torchrun's agent store]
  // torchrun's default (static) rendezvous keeps its own store listening on MASTER_PORT and
  // tells its workers so (TORCHELASTIC_USE_AGENT_STORE=True). That store speaks PyTorch's
  // protocol, not ours, so ringtape's store takes the next port, the same on every node.
  if (get(env, "TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True" && e.master_port != 0) {
    RT_CHECK(e.master_port < 65535, "MASTER_PORT=65535 is torchrun's store, and ringtape's needs the next port: "
             "start torchrun with --master-port 65534 or lower");
    e.master_port += 1;
    e.store_note = "torchrun's agent store holds MASTER_PORT " + std::to_string(e.master_port - 1) +
                   "; ringtape's store uses " + std::to_string(e.master_port);
  }
  return e;
}

LaunchEnv from_slurm(const EnvMap& env) {
  LaunchEnv e;
  e.source = "slurm";
  e.rank = *get_int(env, "SLURM_PROCID");
  const auto world = first_of(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  RT_CHECK(world, "SLURM_PROCID is set but neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is: start the ranks with "
                  "srun, or ", kFix);
  e.world_size = *get_int(env, world->first);
  Names n{"SLURM_PROCID", world->first, "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "MASTER_ADDR", "MASTER_PORT"};
  if (const auto per_node = first_of(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
    e.local_world_size = slurm_tasks_on_node(per_node->second, get_int(env, "SLURM_NODEID").value_or(0), per_node->first);
    n.local_world = per_node->first;
  } else {
    e.local_world_size = get_int(env, "SLURM_NTASKS_PER_NODE").value_or(e.world_size);
  }
  const auto local_rank = get_int(env, "SLURM_LOCALID");
  RT_CHECK(local_rank || e.world_size == 1, "SLURM_LOCALID is not set for ", e.world_size,
           " tasks: start the ranks with srun, which sets it");
  e.local_rank = local_rank.value_or(0);
  if (const auto addr = get(env, "MASTER_ADDR")) {
    e.master_addr = *addr;
  } else if (const auto list = first_of(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
    e.master_addr = slurm_first_host(list->second, list->first);
    n.addr = list->first;
  } else {
    e.master_addr = e.world_size > 1 ? "" : "127.0.0.1";
  }
  if (const auto port = get_int(env, "MASTER_PORT")) {
    e.master_port = *port;
  } else if (e.world_size > 1) {
    // Every rank of a job derives the same port, and two jobs sharing a node most likely
    // differ; a clash still gets the port-in-use error, which says to set MASTER_PORT.
    const std::string job = get(env, "SLURM_JOB_ID").value_or("");
    e.master_port = all_digits(job) ? 20000 + int(std::stoull(job.substr(job.size() > 9 ? job.size() - 9 : 0)) % 20000)
                                    : 29500;
  }
  validate(e, n);
  return e;
}

}  // namespace

LaunchEnv parse_launch_env(const EnvMap& env) {
  LaunchEnv e;
  if (env.count("RANK") || env.count("WORLD_SIZE")) {
    e = from_torchrun(env);
  } else if (env.count("SLURM_PROCID")) {
    e = from_slurm(env);
  } else {  // one process; MASTER_* still choose where its store listens
    e.master_addr = get(env, "MASTER_ADDR").value_or(e.master_addr);
    e.master_port = get_int(env, "MASTER_PORT").value_or(0);
    validate(e, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"});
  }
  // Note [Elastic restarts] in distributed/local_launcher.cc
  e.restart_round = get_int(env, "RINGTAPE_RESTART_ROUND").value_or(0);
  RT_CHECK(e.restart_round >= 0, "RINGTAPE_RESTART_ROUND=", e.restart_round, " (the launcher's restart count) is >= 0");
  e.restart_cause = get(env, "RINGTAPE_RESTART_CAUSE").value_or("");
  return e;
}

LaunchEnv launch_env_from_process() {
  EnvMap env;
  for (char** p = environ; *p; ++p) {
    const std::string kv = *p;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return parse_launch_env(env);
}

std::string slurm_first_host(const std::string& nodelist, const std::string& var) {
  const std::string bad = var + "='" + clip_for_message(nodelist) + "' is not a Slurm node list";
  std::string host;
  for (size_t i = 0; i < nodelist.size() && nodelist[i] != ',';) {
    const char c = nodelist[i];
    RT_CHECK(c != ']', bad, " (a ']' without its '[')");
    if (c != '[') {
      host += c;
      ++i;
      continue;
    }
    // "[01-04,07]": the first range's first number, zero padding kept.
    const size_t close = nodelist.find(']', i);
    RT_CHECK(close != std::string::npos, bad, " (a '[' without its ']')");
    const std::string inside = nodelist.substr(i + 1, close - i - 1);
    const std::string first = inside.substr(0, inside.find_first_of(",-"));
    RT_CHECK(all_digits(first), bad, " (the range '[", clip_for_message(inside), "]' does not start with a number)");
    host += first;
    i = close + 1;
  }
  RT_CHECK(!host.empty(), bad, " (no host before the first ',')");
  return host;
}

int slurm_tasks_on_node(const std::string& counts, int node, const std::string& var) {
  const std::string bad = var + "='" + clip_for_message(counts) + "'";
  size_t i = 0;
  int first_node = 0;  // of the current item
  while (i < counts.size()) {
    size_t end = counts.find(',', i);
    if (end == std::string::npos) end = counts.size();
    const std::string item = counts.substr(i, end - i);
    const size_t paren = item.find("(x");
    const std::string n = item.substr(0, paren);
    const std::string times = paren == std::string::npos ? "1" : item.substr(paren + 2, item.size() - paren - 3);
    RT_CHECK(all_digits(n) && all_digits(times) && (paren == std::string::npos || item.back() == ')') &&
                 n.size() < 9 && times.size() < 9,
             bad, " is not Slurm's tasks per node (like '2(x3),1'): the item '", clip_for_message(item), "'");
    first_node += std::stoi(times);
    if (node < first_node) return std::stoi(n);
    i = end + 1;
  }
  RT_FAIL(bad, " lists ", first_node, " nodes but this is node ", node, " (SLURM_NODEID)");
}

}  // namespace rt::dist
