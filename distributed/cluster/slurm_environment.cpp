#include <cctype>

#include "distributed/cluster/environment_variables.h"
#include "distributed/cluster/environments.h"
#include "core/error.h"

namespace volt {

using namespace cluster_detail;

namespace {

// "001-003,7" → 001, 002, 003, 7 (zero padding kept as written on the lower bound).
std::vector<std::string> expand_range_list(const std::string& ranges, const std::string& hostlist) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    const size_t comma = std::min(ranges.find(',', start), ranges.size());
    const std::string item = ranges.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string low = item.substr(0, dash);
    const std::string high = dash == std::string::npos ? low : item.substr(dash + 1);
    auto digits = [](const std::string& s) {
      return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
    };
    check<ConfigurationError>(digits(low) && digits(high), "SLURM_NODELIST: expected ranges like 1-4 or 07 in '",
                              hostlist, "', got '", item, "'");
    const int64_t a = std::stoll(low), b = std::stoll(high);
    check<ConfigurationError>(a <= b && b - a < 100000, "SLURM_NODELIST: bad range '", item, "' in '", hostlist, "'");
    for (int64_t i = a; i <= b; ++i) {
      std::string number = std::to_string(i);
      if (number.size() < low.size()) number.insert(0, low.size() - number.size(), '0');
      out.push_back(number);
    }
    start = comma + 1;
  }
  return out;
}

// One host-list entry without top-level separators: "r[1-2]n[01-02]" → r1n01, r1n02, r2n01, r2n02.
void expand_entry(const std::string& entry, const std::string& hostlist, std::vector<std::string>& hosts) {
  std::vector<std::string> partial{""};
  size_t i = 0;
  while (i < entry.size()) {
    if (entry[i] == '[') {
      const size_t close = entry.find(']', i);
      check<ConfigurationError>(close != std::string::npos, "SLURM_NODELIST: unbalanced '[' in '", hostlist, "'");
      const auto numbers = expand_range_list(entry.substr(i + 1, close - i - 1), hostlist);
      std::vector<std::string> next;
      for (const auto& prefix : partial) {
        for (const auto& n : numbers) next.push_back(prefix + n);
      }
      partial = std::move(next);
      i = close + 1;
    } else {
      check<ConfigurationError>(entry[i] != ']', "SLURM_NODELIST: unbalanced ']' in '", hostlist, "'");
      for (auto& p : partial) p += entry[i];
      ++i;
    }
  }
  hosts.insert(hosts.end(), partial.begin(), partial.end());
}

std::string first_of(const EnvironmentVariables& variables, const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    if (auto value = lookup(variables, key)) return *value;
  }
  return "";
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& hostlist) {
  std::vector<std::string> hosts;
  std::string entry;
  int depth = 0;
  for (const char c : hostlist + ",") {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if ((c == ',' || c == ' ') && depth == 0) {
      if (!entry.empty()) expand_entry(entry, hostlist, hosts);
      entry.clear();
    } else {
      entry += c;
    }
  }
  check<ConfigurationError>(depth == 0, "SLURM_NODELIST: unbalanced brackets in '", hostlist, "'");
  return hosts;
}

std::vector<int64_t> expand_slurm_tasks_per_node(const std::string& counts) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start < counts.size()) {
    const size_t comma = std::min(counts.find(',', start), counts.size());
    const std::string item = counts.substr(start, comma - start);
    const size_t paren = item.find("(x");
    const int64_t tasks = parse_int(item.substr(0, paren), "SLURM_TASKS_PER_NODE '" + counts + "'", 1);
    int64_t repeat = 1;
    if (paren != std::string::npos) {
      check<ConfigurationError>(item.back() == ')', "SLURM_TASKS_PER_NODE: expected N(xM) in '", counts, "', got '",
                                item, "'");
      repeat = parse_int(item.substr(paren + 2, item.size() - paren - 3), "SLURM_TASKS_PER_NODE '" + counts + "'", 1);
    }
    out.insert(out.end(), static_cast<size_t>(repeat), tasks);
    start = comma + 1;
  }
  check<ConfigurationError>(!out.empty(), "SLURM_TASKS_PER_NODE: expected counts like 2(x3),1, got '", counts, "'");
  return out;
}

bool SLURMEnvironment::detect(const EnvironmentVariables& variables) {
  const auto job_name = lookup(variables, "SLURM_JOB_NAME").value_or("");
  return variables.count("SLURM_NTASKS") && job_name != "bash" && job_name != "interactive";
}

SLURMEnvironment::SLURMEnvironment(const EnvironmentVariables& variables, const ClusterRequest& request) {
  const std::string who = "slurm environment";
  ProcessTopology t;
  t.world_size = require_int(variables, "SLURM_NTASKS", who, 1);
  t.global_rank = require_int(variables, "SLURM_PROCID", who);
  t.local_rank = require_int(variables, "SLURM_LOCALID", who);
  t.node_rank = require_int(variables, "SLURM_NODEID", who);
  const std::string nodes = first_of(variables, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"});
  t.num_nodes = nodes.empty() ? 1 : parse_int(nodes, who + ": number of nodes", 1);
  const std::string per_node = first_of(variables, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (!per_node.empty()) {
    const auto counts = expand_slurm_tasks_per_node(per_node);
    check<ConfigurationError>(t.node_rank < static_cast<int64_t>(counts.size()), who, ": SLURM_NODEID=",
                              t.node_rank, " but tasks per node '", per_node, "' lists ", counts.size(), " node(s)");
    t.local_world_size = counts[static_cast<size_t>(t.node_rank)];
    for (const int64_t c : counts) {
      check<ConfigurationError>(c == counts.front(), who, ": tasks per node '", per_node,
                                "' differ between nodes; volt needs the same number on every node "
                                "(srun --ntasks-per-node)");
    }
  } else if (auto fixed = lookup(variables, "SLURM_NTASKS_PER_NODE")) {
    t.local_world_size = parse_int(*fixed, who + ": SLURM_NTASKS_PER_NODE", 1);
  } else {
    t.local_world_size = t.world_size / t.num_nodes;
  }
  set_topology(t);

  std::string address;
  if (auto user = lookup(variables, "MASTER_ADDR")) {
    address = *user;
  } else {
    const std::string hostlist = first_of(variables, {"SLURM_NODELIST", "SLURM_JOB_NODELIST"});
    const auto hosts = expand_slurm_hostlist(hostlist.empty() ? "127.0.0.1" : hostlist);
    check<ConfigurationError>(!hosts.empty(), who, ": SLURM_NODELIST '", hostlist, "' names no host");
    address = hosts.front();
  }
  // Lightning's port rule: every task derives the same port from the job id.
  int64_t port = 12910;
  if (auto user = lookup(variables, "MASTER_PORT")) {
    port = parse_int(*user, who + ": MASTER_PORT", 1);
  } else if (auto job = lookup(variables, "SLURM_JOB_ID")) {
    const std::string last4 = job->size() > 4 ? job->substr(job->size() - 4) : *job;
    port = 15000 + parse_int(last4, who + ": SLURM_JOB_ID");
  }
  set_rendezvous(address, port);
  check_flags_agree("SLURM", request, topology(), master_addr(), master_port());
}

}  // namespace volt
