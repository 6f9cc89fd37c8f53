// Who this process is in a multi-process job, read once from the environment that launchers
// set, so ringtape starts the same under torchrun, srun and mpirun-style scripts:
//   torchrun (and scripts that imitate it): MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
//     LOCAL_RANK, LOCAL_WORLD_SIZE;
//   Slurm (srun), when RANK/WORLD_SIZE are absent: SLURM_PROCID, SLURM_STEP_NUM_TASKS (else
//     SLURM_NTASKS), SLURM_LOCALID, tasks per node (SLURM_STEP_TASKS_PER_NODE, else
//     SLURM_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE), and the first host of the node list
//     (SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST) as master unless MASTER_ADDR is set;
//   neither: one process (world size 1).
// Every inconsistency is an rt::Error naming the variable, its value and the fix.
#pragma once

#include <map>
#include <string>

namespace rt::dist {

struct LaunchEnv {
  std::string master_addr = "127.0.0.1";  // where rank 0 hosts the store
  int master_port = 0;                    // 0 (one process only): rank 0 picks a free port
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // rank among this node's processes (which GPU to use)
  int local_world_size = 1;
  std::string source = "default";  // "torchrun", "slurm" or "default" (one process)
  std::string store_note;  // why master_port is not MASTER_PORT (Note [torchrun's agent store]), or ""
  // ringtape's launcher restarted the job this many times, the last time because of
  // `restart_cause` (RINGTAPE_RESTART_ROUND, RINGTAPE_RESTART_CAUSE; 0 and "" otherwise).
  int restart_round = 0;
  std::string restart_cause;

  // "rank 1 of 4 (local 1 of 2), master 10.0.0.1:29500, from torchrun", for logs.
  std::string describe() const;
};

using EnvMap = std::map<std::string, std::string>;

// Pure: the launch environment described by `env` (names to values).
LaunchEnv parse_launch_env(const EnvMap& env);
// This process's environment, parsed.
LaunchEnv launch_env_from_process();

// The first host of a Slurm node list: "node[01-04,07],gpu3" -> "node01",
// "rack[1-2]-n[3-4]" -> "rack1-n3". Throws rt::Error, naming `var`, on a malformed list.
std::string slurm_first_host(const std::string& nodelist, const std::string& var = "SLURM_JOB_NODELIST");

// Tasks on node `node` from Slurm's per-node counts: "2(x3),1" is 2,2,2,1.
int slurm_tasks_on_node(const std::string& counts, int node, const std::string& var = "SLURM_TASKS_PER_NODE");

}  // namespace rt::dist
