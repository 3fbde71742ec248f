#include "distributed/cluster/environment_variables.h"
#include "distributed/cluster/environments.h"
#include "core/error.h"
#include "distributed/network.h"

namespace volt {

using namespace cluster_detail;

namespace {
constexpr int64_t kDefaultMultiNodePort = 29500;  // PyTorch's default MASTER_PORT
}

bool VoltEnvironment::is_launched_child(const EnvironmentVariables& variables) {
  return lookup(variables, "VOLT_LAUNCHED").value_or("") == "1";
}

VoltEnvironment::VoltEnvironment(const EnvironmentVariables& variables, const ClusterRequest& request)
    : launched_child_(is_launched_child(variables)) {
  const std::string who = "volt launcher environment";
  if (launched_child_) {
    set_topology(read_rank_variables(variables, "NODE_RANK", who));
    set_rendezvous(lookup(variables, "MASTER_ADDR").value_or(""), require_int(variables, "MASTER_PORT", who, 1));
    // The child parses the same command line as its parent, so its flags agree unless someone
    // edited the environment by hand.
    check_flags_agree("volt's launcher", request, topology(), master_addr(), master_port());
    return;
  }
  ProcessTopology t;
  t.local_world_size = request.devices;
  t.num_nodes = request.num_nodes;
  t.world_size = request.devices * request.num_nodes;
  // --node-rank, else NODE_RANK (Lightning's variable for several nodes without a manager), else 0.
  t.node_rank = request.node_rank;
  if (t.node_rank < 0) {
    const auto variable = lookup(variables, "NODE_RANK");
    t.node_rank = variable ? parse_int(*variable, who + ": NODE_RANK") : 0;
  }
  check<ConfigurationError>(t.node_rank < t.num_nodes, "--node-rank: expected a value in [0, ", t.num_nodes,
                            ") for --num-nodes ", t.num_nodes, ", got ", t.node_rank);
  t.local_rank = 0;
  t.global_rank = t.node_rank * t.local_world_size;
  set_topology(t);

  std::string address = request.master_addr;
  if (address.empty()) address = lookup(variables, "MASTER_ADDR").value_or("");
  if (address.empty()) {
    check<ConfigurationError>(t.num_nodes == 1, "--num-nodes ", t.num_nodes,
                              ": several nodes need the rendezvous address; pass --master-addr (an address of "
                              "node 0 that every node reaches) or set MASTER_ADDR");
    address = "127.0.0.1";
  }
  int64_t port = request.master_port;
  if (port == 0) {
    if (auto variable = lookup(variables, "MASTER_PORT")) {
      port = parse_int(*variable, who + ": MASTER_PORT", 1);
    } else if (t.num_nodes > 1) {
      port = kDefaultMultiNodePort;
    } else {
      // One node: 0, any free port, chosen by the kernel as rank 0 binds its store; the launcher
      // then hands it to the children (start_process_group). A port found free now could be taken
      // by another process of the host before the store binds it.
      port = 0;
    }
  }
  set_rendezvous(address, port);
}

}  // namespace volt
