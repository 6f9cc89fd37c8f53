// The launch environment as torchrun, srun and hand-written scripts set it, and the errors
// for what they get wrong. parse_launch_env is pure, so no process environment is touched.
#include <doctest/doctest.h>

#include <string>

#include "distributed/launch_env.h"
#include "base/error.h"
#include "tests/distributed/test_errors.h"

namespace rt::dist {
namespace {

#define CHECK_ERROR(env, text)                                                        \
  do {                                                                                \
    const std::string msg_ = testing::error_of([&] { parse_launch_env(env); });      \
    INFO(msg_);                                                                       \
    CHECK(msg_.find(text) != std::string::npos);                                      \
  } while (0)

TEST_CASE("launch env: nothing set is one process") {
  const LaunchEnv e = parse_launch_env({});
  CHECK(e.source == "default");
  CHECK(e.world_size == 1);
  CHECK(e.rank == 0);
  CHECK(e.local_world_size == 1);
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port == 0);  // a free port, for the one process's own store
  CHECK(parse_launch_env({{"MASTER_PORT", "29600"}}).master_port == 29600);
  CHECK(e.restart_round == 0);
  CHECK(e.restart_cause.empty());
}

TEST_CASE("launch env: the launcher's restart round and cause, under any launcher") {
  const LaunchEnv e = parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"},
                                        {"RINGTAPE_RESTART_ROUND", "2"}, {"RINGTAPE_RESTART_CAUSE", "rank 1 failed"}});
  CHECK(e.restart_round == 2);
  CHECK(e.restart_cause == "rank 1 failed");
  CHECK(parse_launch_env({{"RINGTAPE_RESTART_ROUND", "1"}}).restart_round == 1);
}

TEST_CASE("launch env: torchrun's variables") {
  const LaunchEnv e = parse_launch_env({{"MASTER_ADDR", "10.0.0.7"},
                                        {"MASTER_PORT", "29500"},
                                        {"RANK", "5"},
                                        {"WORLD_SIZE", "8"},
                                        {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "4"},
                                        {"SLURM_PROCID", "0"}});  // torchrun inside a Slurm job wins
  CHECK(e.describe() == "rank 5 of 8 (local 1 of 4), master 10.0.0.7:29500, from torchrun");
  // A script without the LOCAL_ variables: one node assumed.
  const LaunchEnv s = parse_launch_env({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"}, {"RANK", "2"}, {"WORLD_SIZE", "3"}});
  CHECK(s.local_rank == 2);
  CHECK(s.local_world_size == 3);
}

TEST_CASE("launch env: under torchrun's agent store ringtape's store takes the next port") {
  EnvMap env = {{"MASTER_ADDR", "10.0.0.7"}, {"MASTER_PORT", "29500"}, {"RANK", "1"},
                {"WORLD_SIZE", "2"},         {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  const LaunchEnv e = parse_launch_env(env);
  CHECK(e.master_port == 29501);
  CHECK(e.describe() == "rank 1 of 2 (local 1 of 2), master 10.0.0.7:29501, from torchrun (torchrun's agent store "
                        "holds MASTER_PORT 29500; ringtape's store uses 29501)");
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  CHECK(parse_launch_env(env).master_port == 29500);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["MASTER_PORT"] = "65535";
  CHECK(testing::error_of([&] { parse_launch_env(env); }).find("start torchrun with --master-port 65534") !=
        std::string::npos);
}

TEST_CASE("launch env: torchrun's mistakes are named with the fix") {
  const EnvMap ok = {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}, {"RANK", "1"}, {"WORLD_SIZE", "4"}};
  auto with = [&](const std::string& k, const std::string& v) {
    EnvMap e = ok;
    e[k] = v;
    return e;
  };
  auto without = [&](const std::string& k) {
    EnvMap e = ok;
    e.erase(k);
    return e;
  };
  CHECK_ERROR(with("RANK", "4"), "RANK=4 with WORLD_SIZE=4: ranks are 0..3");
  CHECK_ERROR(with("RANK", "-1"), "RANK=-1 with WORLD_SIZE=4");
  CHECK_ERROR(with("RANK", "one"), "RANK='one' is not a whole number");
  CHECK_ERROR(with("WORLD_SIZE", "4 "), "WORLD_SIZE='4 ' is not a whole number");
  CHECK_ERROR(with("WORLD_SIZE", ""), "WORLD_SIZE='' is not a whole number");
  CHECK_ERROR(with("WORLD_SIZE", "99999999999"), "WORLD_SIZE='99999999999' is not a whole number");
  CHECK_ERROR(with("WORLD_SIZE", "0"), "WORLD_SIZE=0: the number of processes is at least 1");
  CHECK_ERROR(without("WORLD_SIZE"), "RANK is set but WORLD_SIZE is not");
  CHECK_ERROR(without("RANK"), "WORLD_SIZE is set but RANK is not");
  CHECK_ERROR(without("MASTER_ADDR"), "MASTER_ADDR is not set, and 4 processes need it");
  CHECK_ERROR(with("MASTER_ADDR", ""), "MASTER_ADDR is not set");
  CHECK_ERROR(without("MASTER_PORT"), "MASTER_PORT=0 (a free port, picked by rank 0) works for one process only");
  CHECK_ERROR(with("MASTER_PORT", "70000"), "MASTER_PORT=70000 is not a TCP port");
  CHECK_ERROR(with("MASTER_PORT", "http"), "MASTER_PORT='http' is not a whole number");
  EnvMap local = ok;
  local["LOCAL_RANK"] = "2";
  local["LOCAL_WORLD_SIZE"] = "2";
  CHECK_ERROR(local, "LOCAL_RANK=2 with LOCAL_WORLD_SIZE=2: local ranks are 0..1");
  local["LOCAL_WORLD_SIZE"] = "8";
  CHECK_ERROR(local, "LOCAL_WORLD_SIZE=8 with WORLD_SIZE=4: a node runs 1..4");
  local.erase("LOCAL_RANK");
  CHECK_ERROR(local, "LOCAL_WORLD_SIZE is set but LOCAL_RANK is not");
}

TEST_CASE("launch env: Slurm's variables, master from the node list") {
  const EnvMap srun = {{"SLURM_PROCID", "6"},       {"SLURM_NTASKS", "8"},
                       {"SLURM_LOCALID", "2"},      {"SLURM_NODEID", "1"},
                       {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                       {"SLURM_JOB_ID", "123456"}};
  const LaunchEnv e = parse_launch_env(srun);
  // The port is derived from the job id, so every rank of the job has the same one.
  CHECK(e.describe() == "rank 6 of 8 (local 2 of 4), master gpu07:" + std::to_string(20000 + 123456 % 20000) +
                            ", from slurm");
  EnvMap own = srun;
  own["MASTER_ADDR"] = "10.1.1.1";
  own["MASTER_PORT"] = "29501";
  own["SLURM_STEP_NUM_TASKS"] = "7";  // the step's tasks, not the allocation's
  own["SLURM_STEP_NODELIST"] = "x1";
  const LaunchEnv o = parse_launch_env(own);
  CHECK(o.master_addr == "10.1.1.1");
  CHECK(o.master_port == 29501);
  CHECK(o.world_size == 7);
  EnvMap per_node = srun;
  per_node.erase("SLURM_TASKS_PER_NODE");
  per_node["SLURM_NTASKS_PER_NODE"] = "4";
  CHECK(parse_launch_env(per_node).local_world_size == 4);
  per_node.erase("SLURM_JOB_ID");
  CHECK(parse_launch_env(per_node).master_port == 29500);
}

TEST_CASE("launch env: Slurm's mistakes are named") {
  CHECK_ERROR(EnvMap({{"SLURM_PROCID", "0"}}), "neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS");
  CHECK_ERROR(EnvMap({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_JOB_NODELIST", "a"}}),
              "SLURM_PROCID=3 with SLURM_NTASKS=2");
  CHECK_ERROR(EnvMap({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a"}}),
              "SLURM_LOCALID is not set for 2 tasks");
  CHECK_ERROR(EnvMap({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}}),
              "MASTER_ADDR is not set, and 2 processes need it");
  CHECK_ERROR(EnvMap({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}, {"SLURM_JOB_NODELIST", "n[1-2"}}),
              "SLURM_JOB_NODELIST='n[1-2' is not a Slurm node list (a '[' without its ']')");
  CHECK_ERROR(EnvMap({{"SLURM_PROCID", "1"},
                      {"SLURM_NTASKS", "2"},
                      {"SLURM_LOCALID", "1"},
                      {"SLURM_NODEID", "3"},
                      {"SLURM_TASKS_PER_NODE", "1(x2)"},
                      {"SLURM_JOB_NODELIST", "a,b"}}),
              "SLURM_TASKS_PER_NODE='1(x2)' lists 2 nodes but this is node 3");
  // One task, as in a batch script's own step: a single process, no master needed.
  const LaunchEnv one = parse_launch_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  CHECK(one.world_size == 1);
  CHECK(one.master_port == 0);
}

TEST_CASE("launch env: the first host of a Slurm node list") {
  CHECK(slurm_first_host("node[01-04,07],gpu3") == "node01");
  CHECK(slurm_first_host("gpu3,node[01-04,07]") == "gpu3");
  CHECK(slurm_first_host("node[07,01-04]") == "node07");  // Slurm's order, not sorted
  CHECK(slurm_first_host("rack[1-2]-n[003-004]") == "rack1-n003");
  CHECK(slurm_first_host("login-1") == "login-1");
  CHECK(slurm_first_host("a.example.org,b") == "a.example.org");
  for (const std::string bad : {"", ",a", "n]", "n[", "n[a-b]", "n[]"}) {
    CHECK_THROWS_AS(slurm_first_host(bad), Error);
  }
  CHECK(slurm_tasks_on_node("2(x3),1", 0) == 2);
  CHECK(slurm_tasks_on_node("2(x3),1", 2) == 2);
  CHECK(slurm_tasks_on_node("2(x3),1", 3) == 1);
  CHECK(slurm_tasks_on_node("8", 0) == 8);
  CHECK_THROWS_AS(slurm_tasks_on_node("2(x3", 0), Error);
  CHECK_THROWS_AS(slurm_tasks_on_node("two", 0), Error);
}

}  // namespace
}  // namespace rt::dist
