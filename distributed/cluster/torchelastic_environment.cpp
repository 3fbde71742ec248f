#include "distributed/cluster/environment_variables.h"
#include "distributed/cluster/environments.h"
#include "core/error.h"

namespace volt {

using namespace cluster_detail;

namespace {
const std::vector<std::string> kRequired{"RANK",       "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                         "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"};
}

// Lightning's rule: torchelastic sets all four of these; a user exporting RANK alone does not.
bool TorchElasticEnvironment::detect(const EnvironmentVariables& variables) {
  return has_all(variables, {"RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"});
}

TorchElasticEnvironment::TorchElasticEnvironment(const EnvironmentVariables& variables,
                                                 const ClusterRequest& request) {
  const std::string who = "torchelastic environment";
  const auto absent = missing(variables, kRequired);
  if (!absent.empty()) {
    std::string list;
    for (const auto& key : absent) list += (list.empty() ? "" : ", ") + key;
    throw ConfigurationError(who + ": expected torchrun's variables, but " + list +
                             (absent.size() == 1 ? " is" : " are") +
                             " not set; start the program with torchrun, or choose another --cluster-environment");
  }
  set_topology(read_rank_variables(variables, "GROUP_RANK", who));
  set_rendezvous(*lookup(variables, "MASTER_ADDR"), require_int(variables, "MASTER_PORT", who, 1));
  use_agent_store_ = lookup(variables, "TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  if (auto restarts = lookup(variables, "TORCHELASTIC_RESTART_COUNT")) {
    restart_count_ = parse_int(*restarts, who + ": TORCHELASTIC_RESTART_COUNT");
  }
  check_flags_agree("torchrun", request, topology(), master_addr(), master_port());
}

std::string TorchElasticEnvironment::store_prefix() const {
  return use_agent_store_ ? "/worker/attempt_" + std::to_string(restart_count_) : "";
}

}  // namespace volt
