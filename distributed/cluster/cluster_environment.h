#pragma once
// Who am I and who are my peers: a ClusterEnvironment reads what the process manager that
// started this process (torchrun, SLURM's srun, mpirun, volt's own launcher) left in the
// environment and turns it into a ProcessTopology and a rendezvous address.
//
// Environments are built from an explicit variable map (not the live environment) so that every
// cluster type is tested from env maps; current_environment() reads the process's own.
// Immutable after construction; thread-safe.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_topology.h"

namespace volt {

using EnvironmentVariables = std::map<std::string, std::string>;

// The process's environment (environ) as a map.
EnvironmentVariables current_environment();

// What the user asked for on the command line (TrainerOptions), for the environments that take
// it into account. Zero / empty means "not given".
struct ClusterRequest {
  int64_t devices = 1;      // processes per node
  int64_t num_nodes = 1;
  int64_t node_rank = -1;   // -1: not given
  std::string master_addr;  // "": not given
  int64_t master_port = 0;  // 0: not given
};

class ClusterEnvironment {
 public:
  virtual ~ClusterEnvironment() = default;
  // "torchelastic", "slurm", "mpi" or "volt".
  virtual std::string name() const = 0;
  // True when another program started every process of the run (torchrun, srun, mpirun, or
  // volt's launcher when this process is one of its children); false when this process must
  // start the other local ranks itself (volt's launcher, in the process the user started).
  virtual bool creates_processes_externally() const = 0;
  const ProcessTopology& topology() const { return topology_; }
  const std::string& master_addr() const { return master_addr_; }
  // 0: rank 0 binds any free port as it starts its store and hands it to the ranks it starts
  // (volt's launcher on one node without --master-port or MASTER_PORT).
  int64_t master_port() const { return master_port_; }
  // torchelastic's agent store: the store already runs (in the agent), every rank connects as a
  // client, keys live under store_prefix().
  virtual bool store_is_external() const { return false; }
  virtual std::string store_prefix() const { return ""; }
  // How often the process manager restarted the group (torchelastic); 0 otherwise.
  virtual int64_t restart_count() const { return 0; }

 protected:
  // Checks the topology's invariants; throws ConfigurationError naming this environment.
  void set_topology(const ProcessTopology& topology);
  void set_rendezvous(std::string master_addr, int64_t master_port);

 private:
  ProcessTopology topology_;
  std::string master_addr_;
  int64_t master_port_ = 0;
};

// The names accepted by --cluster-environment: "auto", torchelastic, slurm, mpi, volt, then any
// registered (cluster_environment_registry.h, which resolves both functions below). The reference
// stays valid and includes environments registered later.
const std::vector<std::string>& cluster_environment_names();

// Resolves `name` ("auto": the first detected, in the order of cluster_environment_registry.h;
// volt's own launcher when no other is detected) against `variables` and `request`. Throws ConfigurationError for an
// unknown name (listing the valid ones and the closest), a forced environment whose variables are missing (naming
// them), malformed values, and flags that contradict the environment.
std::shared_ptr<ClusterEnvironment> make_cluster_environment(const std::string& name,
                                                             const EnvironmentVariables& variables,
                                                             const ClusterRequest& request);

}  // namespace volt
