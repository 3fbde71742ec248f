#pragma once
// The cluster environments volt knows, in detection order. Each reads only the variable map it is
// given. make_cluster_environment() (cluster_environment.h) picks one; tests build them directly.
#include <string>
#include <vector>

#include "distributed/cluster/cluster_environment.h"

namespace volt {

// torchrun / torchelastic: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT. When TORCHELASTIC_USE_AGENT_STORE is
// "True" the agent already hosts the TCPStore at MASTER_ADDR:MASTER_PORT: every rank (rank 0
// too) connects as a client and keys are prefixed with "/worker/attempt_<restart count>" (what
// torch.distributed's env:// rendezvous does), so a restarted group never reads stale keys.
class TorchElasticEnvironment : public ClusterEnvironment {
 public:
  static bool detect(const EnvironmentVariables& variables);
  TorchElasticEnvironment(const EnvironmentVariables& variables, const ClusterRequest& request);
  std::string name() const override { return "torchelastic"; }
  bool creates_processes_externally() const override { return true; }
  bool store_is_external() const override { return use_agent_store_; }
  std::string store_prefix() const override;
  int64_t restart_count() const override { return restart_count_; }

 private:
  bool use_agent_store_ = false;
  int64_t restart_count_ = 0;
};

// SLURM (srun): SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, tasks per node from
// SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE ("2(x3),1"), MASTER_ADDR = the first host
// of SLURM_NODELIST (bracket ranges expanded), MASTER_PORT by Lightning's rule: the MASTER_PORT
// variable if set, else 15000 + the last four digits of SLURM_JOB_ID, else 12910. Not detected
// when SLURM_JOB_NAME is "bash" or "interactive" (an interactive allocation where the user
// starts processes another way), like Lightning.
class SLURMEnvironment : public ClusterEnvironment {
 public:
  static bool detect(const EnvironmentVariables& variables);
  SLURMEnvironment(const EnvironmentVariables& variables, const ClusterRequest& request);
  std::string name() const override { return "slurm"; }
  bool creates_processes_externally() const override { return true; }
};

// Open MPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE) or a PMI launcher such as MPICH's
// Hydra (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS). MPI only starts the processes;
// the rendezvous still goes through a TCPStore at MASTER_ADDR:MASTER_PORT (--master-addr /
// --master-port, else the variables; on a single node 127.0.0.1 and 29500 by default). Ranks are
// assumed to be placed node by node (mpirun's default --map-by slot), so node = rank / local size.
class MPIEnvironment : public ClusterEnvironment {
 public:
  static bool detect(const EnvironmentVariables& variables);
  MPIEnvironment(const EnvironmentVariables& variables, const ClusterRequest& request);
  std::string name() const override { return "mpi"; }
  bool creates_processes_externally() const override { return true; }
};

// volt's own launcher. In the process the user started (the "parent") the topology comes from
// --devices, --num-nodes and --node-rank, and this process is local rank 0: it starts local ranks
// 1..devices-1 itself (ProcessLauncher). Those children carry VOLT_LAUNCHED=1 with RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR and MASTER_PORT, and read them
// back here. MASTER_ADDR: --master-addr, else MASTER_ADDR, else 127.0.0.1 on one node (several
// nodes need it). MASTER_PORT: --master-port, else MASTER_PORT, else a free port on one node and
// 29500 on several.
class VoltEnvironment : public ClusterEnvironment {
 public:
  // Whether this process is a child of volt's launcher.
  static bool is_launched_child(const EnvironmentVariables& variables);
  VoltEnvironment(const EnvironmentVariables& variables, const ClusterRequest& request);
  std::string name() const override { return "volt"; }
  bool creates_processes_externally() const override { return launched_child_; }

 private:
  bool launched_child_ = false;
};

// The hosts of a SLURM host list, in order: "node[001-003,7],gpu5" → node001, node002, node003,
// node7, gpu5; several bracket groups multiply out ("r[1-2]n[1-2]" → r1n1, r1n2, r2n1, r2n2);
// commas and spaces separate entries. Throws ConfigurationError for unbalanced or bad ranges.
std::vector<std::string> expand_slurm_hostlist(const std::string& hostlist);

// SLURM's compressed per-node counts: "2(x3),1" → {2, 2, 2, 1}. Throws ConfigurationError.
std::vector<int64_t> expand_slurm_tasks_per_node(const std::string& counts);

}  // namespace volt
