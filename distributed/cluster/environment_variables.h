#pragma once
// Reading cluster variables with errors that name the variable, its value and the environment.
// Internal to distributed/cluster.
#include <optional>
#include <string>
#include <vector>

#include "distributed/cluster/cluster_environment.h"

namespace volt::cluster_detail {

std::optional<std::string> lookup(const EnvironmentVariables& variables, const std::string& key);
bool has_all(const EnvironmentVariables& variables, const std::vector<std::string>& keys);
// The keys of `keys` that `variables` lacks.
std::vector<std::string> missing(const EnvironmentVariables& variables, const std::vector<std::string>& keys);
// An integer variable; throws ConfigurationError (naming `who`, the key and the value) when it is
// absent or not an integer >= `minimum`.
int64_t require_int(const EnvironmentVariables& variables, const std::string& key, const std::string& who,
                    int64_t minimum = 0);
// Parses `text` as an integer >= minimum, naming `what` when it is not.
int64_t parse_int(const std::string& text, const std::string& what, int64_t minimum = 0);

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and the node from `node_key` (torchrun's and
// volt's launcher's names); num_nodes = WORLD_SIZE / LOCAL_WORLD_SIZE, which must divide.
ProcessTopology read_rank_variables(const EnvironmentVariables& variables, const std::string& node_key,
                                    const std::string& who);

// Fails when a flag the user gave contradicts what the process manager decided: "--master-port
// 1234 contradicts MASTER_PORT=29500 set by torchrun; remove the flag".
void check_flags_agree(const std::string& manager, const ClusterRequest& request, const ProcessTopology& topology,
                       const std::string& master_addr, int64_t master_port);

}  // namespace volt::cluster_detail
