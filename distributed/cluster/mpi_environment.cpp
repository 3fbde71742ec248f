#include "distributed/cluster/environment_variables.h"
#include "distributed/cluster/environments.h"
#include "core/error.h"

namespace volt {

using namespace cluster_detail;

namespace {

struct MPIVariables {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};
const MPIVariables kOpenMPI{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                            "OMPI_COMM_WORLD_LOCAL_SIZE"};
const MPIVariables kPMI{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};

constexpr int64_t kDefaultPort = 29500;  // PyTorch's default MASTER_PORT

}  // namespace

bool MPIEnvironment::detect(const EnvironmentVariables& variables) {
  return has_all(variables, {kOpenMPI.rank, kOpenMPI.size}) || has_all(variables, {kPMI.rank, kPMI.size});
}

MPIEnvironment::MPIEnvironment(const EnvironmentVariables& variables, const ClusterRequest& request) {
  const std::string who = "mpi environment";
  const bool open_mpi = has_all(variables, {kOpenMPI.rank, kOpenMPI.size});
  check<ConfigurationError>(open_mpi || has_all(variables, {kPMI.rank, kPMI.size}), who,
                            ": expected Open MPI's OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/PMI_SIZE, but neither is "
                            "set; start the program with mpirun, or choose another --cluster-environment");
  const MPIVariables& names = open_mpi ? kOpenMPI : kPMI;
  ProcessTopology t;
  t.global_rank = require_int(variables, names.rank, who);
  t.world_size = require_int(variables, names.size, who, 1);
  // Without local variables (some PMI launchers), every rank is taken to be on its own node
  // unless the whole world fits the --devices the user asked for.
  if (has_all(variables, {names.local_rank, names.local_size})) {
    t.local_rank = require_int(variables, names.local_rank, who);
    t.local_world_size = require_int(variables, names.local_size, who, 1);
  } else {
    t.local_world_size = request.devices == t.world_size ? t.world_size : 1;
    t.local_rank = t.global_rank % t.local_world_size;
  }
  check<ConfigurationError>(t.world_size % t.local_world_size == 0, who, ": ", t.world_size,
                            " ranks do not split into nodes of ", t.local_world_size,
                            "; volt needs the same number of processes on every node");
  t.num_nodes = t.world_size / t.local_world_size;
  t.node_rank = t.global_rank / t.local_world_size;
  check<ConfigurationError>(t.global_rank % t.local_world_size == t.local_rank, who, ": rank ", t.global_rank,
                            " has local rank ", t.local_rank, ", so ranks are not placed node by node; use "
                            "mpirun --map-by slot (the default)");
  set_topology(t);

  std::string address = request.master_addr;
  if (address.empty()) address = lookup(variables, "MASTER_ADDR").value_or("");
  if (address.empty()) {
    check<ConfigurationError>(t.num_nodes == 1, who, ": ", t.num_nodes,
                              " nodes need a rendezvous address; pass --master-addr (the address of rank 0's "
                              "host) or export MASTER_ADDR through mpirun -x");
    address = "127.0.0.1";
  }
  int64_t port = request.master_port;
  if (port == 0) {
    const auto variable = lookup(variables, "MASTER_PORT");
    port = variable ? parse_int(*variable, who + ": MASTER_PORT", 1) : kDefaultPort;
  }
  set_rendezvous(address, port);
  check_flags_agree("mpirun", {request.devices, request.num_nodes, request.node_rank, "", 0}, topology(),
                    master_addr(), master_port());
}

}  // namespace volt
