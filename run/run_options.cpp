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
  check<ConfigurationError>(!hang_check || *hang_check < timeout,
                            "--hang-check: expected an interval below --timeout (", timeout.count() / 1000.0,
                            " s), got ", hang_check.value_or(timeout).count() / 1000.0,
                            " s: the check would never run before the timeout; lower --hang-check (0 turns it off) "
                            "or raise --timeout");
  check<ConfigurationError>(process_group_backend != "nccl" || accelerator != "cpu",
                            "--process-group-backend nccl: NCCL moves tensors on CUDA devices, but --accelerator is "
                            "cpu; use --process-group-backend gloo (or auto), or --accelerator cuda");
}

std::chrono::milliseconds RunOptions::hang_check_interval() const {
  return hang_check.value_or(std::min<std::chrono::milliseconds>(std::chrono::seconds(5), timeout / 2));
}

}  // namespace volt
