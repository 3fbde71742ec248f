#include "distributed/cluster/cluster_environment.h"

#include "core/error.h"

extern char** environ;

namespace volt {

EnvironmentVariables current_environment() {
  EnvironmentVariables variables;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string text(*entry);
    const auto eq = text.find('=');
    if (eq != std::string::npos) variables[text.substr(0, eq)] = text.substr(eq + 1);
  }
  return variables;
}

void ClusterEnvironment::set_topology(const ProcessTopology& t) {
  const std::string who = name() + " environment";
  check<ConfigurationError>(t.world_size >= 1, who, ": expected a world size >= 1, got ", t.world_size);
  check<ConfigurationError>(t.global_rank >= 0 && t.global_rank < t.world_size, who, ": expected a rank in [0, ",
                            t.world_size, "), got ", t.global_rank);
  check<ConfigurationError>(t.local_world_size >= 1 && t.local_world_size <= t.world_size, who,
                            ": expected between 1 and ", t.world_size, " processes per node, got ",
                            t.local_world_size);
  check<ConfigurationError>(t.local_rank >= 0 && t.local_rank < t.local_world_size, who,
                            ": expected a local rank in [0, ", t.local_world_size, "), got ", t.local_rank);
  check<ConfigurationError>(t.num_nodes >= 1 && t.node_rank >= 0 && t.node_rank < t.num_nodes, who,
                            ": expected a node rank in [0, ", t.num_nodes, "), got ", t.node_rank);
  check<ConfigurationError>(t.world_size == t.local_world_size * t.num_nodes, who, ": expected ", t.num_nodes,
                            " node(s) × ", t.local_world_size, " processes = ", t.num_nodes * t.local_world_size,
                            " ranks, got a world size of ", t.world_size,
                            "; volt needs the same number of processes on every node");
  topology_ = t;
}

void ClusterEnvironment::set_rendezvous(std::string master_addr, int64_t master_port) {
  const std::string who = name() + " environment";
  check<ConfigurationError>(!master_addr.empty(), who, ": expected a master address, got ''");
  check<ConfigurationError>(master_port >= 0 && master_port <= 65535, who,
                            ": expected a master port in [0, 65535], got ", master_port);
  master_addr_ = std::move(master_addr);
  master_port_ = master_port;
}

}  // namespace volt
