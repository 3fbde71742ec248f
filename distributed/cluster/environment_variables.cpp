#include "distributed/cluster/environment_variables.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace volt::cluster_detail {

std::optional<std::string> lookup(const EnvironmentVariables& variables, const std::string& key) {
  auto found = variables.find(key);
  if (found == variables.end()) return std::nullopt;
  return found->second;
}

bool has_all(const EnvironmentVariables& variables, const std::vector<std::string>& keys) {
  return missing(variables, keys).empty();
}

std::vector<std::string> missing(const EnvironmentVariables& variables, const std::vector<std::string>& keys) {
  std::vector<std::string> absent;
  for (const auto& key : keys) {
    if (!variables.count(key)) absent.push_back(key);
  }
  return absent;
}

int64_t parse_int(const std::string& text, const std::string& what, int64_t minimum) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  check<ConfigurationError>(!text.empty() && end != nullptr && *end == '\0' && errno == 0, what,
                            ": expected an integer, got '", text, "'");
  check<ConfigurationError>(value >= minimum, what, ": expected an integer >= ", minimum, ", got ", value);
  return value;
}

int64_t require_int(const EnvironmentVariables& variables, const std::string& key, const std::string& who,
                    int64_t minimum) {
  const auto value = lookup(variables, key);
  check<ConfigurationError>(value.has_value(), who, ": expected the variable ", key, " to be set, but it is not");
  return parse_int(*value, who + ": " + key, minimum);
}

ProcessTopology read_rank_variables(const EnvironmentVariables& variables, const std::string& node_key,
                                    const std::string& who) {
  ProcessTopology t;
  t.global_rank = require_int(variables, "RANK", who);
  t.world_size = require_int(variables, "WORLD_SIZE", who, 1);
  t.local_rank = require_int(variables, "LOCAL_RANK", who);
  t.local_world_size = require_int(variables, "LOCAL_WORLD_SIZE", who, 1);
  t.node_rank = require_int(variables, node_key, who);
  check<ConfigurationError>(t.world_size % t.local_world_size == 0, who, ": WORLD_SIZE=", t.world_size,
                            " is not a multiple of LOCAL_WORLD_SIZE=", t.local_world_size,
                            "; volt needs the same number of processes on every node");
  t.num_nodes = t.world_size / t.local_world_size;
  return t;
}

void check_flags_agree(const std::string& manager, const ClusterRequest& request, const ProcessTopology& topology,
                       const std::string& master_addr, int64_t master_port) {
  const std::string remedy = " set by " + manager + "; remove the flag or make it agree";
  // --devices 1 --num-nodes 1 are the defaults: then the process manager's numbers are adopted.
  const bool explicit_shape = request.devices != 1 || request.num_nodes != 1;
  check<ConfigurationError>(!explicit_shape || request.devices == topology.local_world_size, "--devices ",
                            request.devices, " contradicts ", topology.local_world_size, " processes per node",
                            remedy);
  check<ConfigurationError>(!explicit_shape || request.num_nodes == topology.num_nodes, "--num-nodes ",
                            request.num_nodes, " contradicts ", topology.num_nodes, " nodes", remedy);
  check<ConfigurationError>(request.node_rank < 0 || request.node_rank == topology.node_rank, "--node-rank ",
                            request.node_rank, " contradicts node rank ", topology.node_rank, remedy);
  check<ConfigurationError>(request.master_addr.empty() || request.master_addr == master_addr, "--master-addr ",
                            request.master_addr, " contradicts MASTER_ADDR=", master_addr, remedy);
  check<ConfigurationError>(request.master_port == 0 || request.master_port == master_port, "--master-port ",
                            request.master_port, " contradicts MASTER_PORT=", master_port, remedy);
}

}  // namespace volt::cluster_detail
