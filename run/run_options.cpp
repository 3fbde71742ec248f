#include "run/run_options.h"

#include <algorithm>

#include "core/error.h"
#include "distributed/cluster/cluster_environment.h"
#include "precision/precision.h"

namespace volt {

ClusterRequest RunOptions::cluster_request() const { return {devices, num_nodes, node_rank, master_addr, master_port}; }

void RunOptions::validate() const {
  check<ConfigurationError>(accelerator == "cpu" || accelerator == "cuda" || accelerator == "auto",
                            "--accelerator: expected cpu, cuda or auto, got '", accelerator, "'");
  check<ConfigurationError>(devices >= 1, "--devices: expected >= 1, got ", devices);
  check<ConfigurationError>(num_nodes >= 1, "--num-nodes: expected >= 1, got ", num_nodes);
  check<ConfigurationError>(threads >= 0, "--threads: expected >= 1 (or 0: automatic), got ", threads);
  check<ConfigurationError>(blas_threads >= 0, "--blas-threads: expected >= 1 (or 0: automatic), got ",
                            blas_threads);
  const auto& environments = cluster_environment_names();
  if (std::find(environments.begin(), environments.end(), cluster_environment) == environments.end()) {
    make_cluster_environment(cluster_environment, {}, {});  // throws with the valid names and a suggestion
  }
  check<ConfigurationError>(node_rank >= -1, "--node-rank: expected >= 0 (or -1: NODE_RANK or 0), got ", node_rank);
  check<ConfigurationError>(node_rank < num_nodes, "--node-rank: expected a value below --num-nodes (", num_nodes,
                            "), got ", node_rank);
  check<ConfigurationError>(master_port >= 0 && master_port <= 65535,
                            "--master-port: expected a port in [1, 65535] (or 0: MASTER_PORT / automatic), got ",
                            master_port);
  check<ConfigurationError>(timeout.count() > 0, "--timeout: expected > 0 seconds, got ",
                            static_cast<double>(timeout.count()) / 1000.0);
  canonical_precision_name(precision);  // throws with the valid values and a suggestion
}

}  // namespace volt
