#include "run/run_options.h"

#include <algorithm>

#include "core/error.h"
#include "distributed/cluster/cluster_environment.h"
#include "precision/precision.h"
#include "run/run_option_flags.h"

namespace volt {

ClusterRequest RunOptions::cluster_request() const { return {devices, num_nodes, node_rank, master_addr, master_port}; }

const OptionSchema<RunOptions>& RunOptions::schema() {
  static const auto schema = [] {
    OptionSchema<RunOptions> declared("volt run options", KeyNaming::Flag);
    declare_run_flags(declared);
    return declared;
  }();
  return schema;
}

void RunOptions::validate() const {
  schema().validate(*this);
  check_combinations();
}

void RunOptions::check_combinations() const {
  const auto& environments = cluster_environment_names();
  if (std::find(environments.begin(), environments.end(), cluster_environment) == environments.end()) {
    make_cluster_environment(cluster_environment, {}, {});  // throws with the valid names and a suggestion
  }
  check<ConfigurationError>(node_rank < num_nodes, "--node-rank: expected a value below --num-nodes (", num_nodes,
                            "), got ", node_rank);
  canonical_precision_name(precision);  // throws with the valid values and a suggestion
}

}  // namespace volt
