#include "distributed/topology.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace volt {

std::unique_ptr<Topology> Topology::build(std::shared_ptr<Communicator> world, const ProcessTopology& process,
                                          std::optional<int64_t> node_size) {
  VOLT_INTERNAL_ASSERT(world != nullptr, "Topology::build needs the world communicator");
  const int64_t n = world->size();
  VOLT_INTERNAL_ASSERT(process.world_size == n, "Topology::build: the cluster has ", process.world_size,
                       " processes, the communicator ", n);
  std::unique_ptr<Topology> topology(new Topology());
  Topology& t = *topology;
  t.world_ = std::move(world);
  t.node_of_rank_.resize(static_cast<size_t>(n));
  if (node_size) {
    check<ConfigurationError>(*node_size >= 1 && n % *node_size == 0, "Topology: expected a node size (subgroup "
                              "size) that divides the world size ", n, ", got ", *node_size, "; choose one of the "
                              "divisors of ", n);
    t.simulated_ = true;
    for (int64_t r = 0; r < n; ++r) t.node_of_rank_[static_cast<size_t>(r)] = r / *node_size;
  } else {
    // Every rank says which node it is on: ranks need not be numbered node by node.
    const auto gathered = t.world_->all_gather(torch::tensor({process.node_rank}, torch::kLong)).flatten();
    const int64_t* node_rank = gathered.data_ptr<int64_t>();
    const std::set<int64_t> distinct(node_rank, node_rank + n);
    const std::vector<int64_t> order(distinct.begin(), distinct.end());
    for (int64_t r = 0; r < n; ++r) {
      t.node_of_rank_[static_cast<size_t>(r)] =
          std::lower_bound(order.begin(), order.end(), node_rank[r]) - order.begin();
    }
  }
  const int64_t me = t.world_->rank();
  t.node_index_ = t.node_of_rank_[static_cast<size_t>(me)];
  t.num_nodes_ = *std::max_element(t.node_of_rank_.begin(), t.node_of_rank_.end()) + 1;
  // Every rank creates every node's group, in node order (new_group is a collective over the
  // world's numbering of groups); only members connect.
  std::vector<int64_t> leaders;
  for (int64_t node = 0; node < t.num_nodes_; ++node) {
    std::vector<int64_t> members;
    for (int64_t r = 0; r < n; ++r) {
      if (t.node_of_rank_[static_cast<size_t>(r)] == node) members.push_back(r);
    }
    leaders.push_back(members.front());
    if (node == t.node_index_) t.node_size_ = static_cast<int64_t>(members.size());
    if (static_cast<int64_t>(members.size()) == n) {
      t.node_ = t.world_;
      continue;
    }
    auto group = t.world_->new_group(members);
    if (node == t.node_index_) t.node_ = std::move(group);
  }
  if (static_cast<int64_t>(leaders.size()) == n) {
    t.leaders_ = t.world_;
  } else {
    t.leaders_ = t.world_->new_group(leaders);
  }
  return topology;
}

Communicator& Topology::consecutive_group(int64_t size) {
  const int64_t n = world_size();
  check<ConfigurationError>(size >= 1 && n % size == 0, "Topology: expected a group size that divides the world "
                            "size ", n, ", got ", size, "; choose one of the divisors of ", n);
  if (size == n) return *world_;
  bool nodes_are_consecutive = true;
  for (int64_t r = 0; r < n; ++r) nodes_are_consecutive &= node_of_rank_[static_cast<size_t>(r)] == r / node_size_;
  if (nodes_are_consecutive && n % node_size_ == 0 && size == node_size_) return *node_;
  auto& group = consecutive_[size];
  if (!group) group = world_->new_subgroups(size);
  return *group;
}

Communicator& Topology::peers() {
  if (peers_) return *peers_;
  const int64_t n = world_size();
  std::vector<std::vector<int64_t>> nodes(static_cast<size_t>(num_nodes_));
  for (int64_t r = 0; r < n; ++r) nodes[static_cast<size_t>(node_of_rank_[static_cast<size_t>(r)])].push_back(r);
  for (const auto& node : nodes) {
    check<ConfigurationError>(node.size() == nodes.front().size(), "Topology: replicas across nodes need nodes of one "
                              "size; node 0 has ", nodes.front().size(), " processes and another ", node.size(),
                              "; run as many processes on every node");
  }
  const int64_t me = world_->rank();
  // Every rank creates every place's group, in place order (new_group's contract).
  for (size_t place = 0; place < nodes.front().size(); ++place) {
    std::vector<int64_t> members;
    for (const auto& node : nodes) members.push_back(node[place]);
    const bool mine = std::find(members.begin(), members.end(), me) != members.end();
    if (static_cast<int64_t>(members.size()) == n) {
      peers_ = world_;
      continue;
    }
    auto group = world_->new_group(members);
    if (mine) peers_ = std::move(group);
  }
  VOLT_INTERNAL_ASSERT(peers_ != nullptr, "Topology::peers: this rank is in no place's group");
  return *peers_;
}

std::vector<std::pair<std::string, const Communicator*>> Topology::groups() const {
  std::vector<std::pair<std::string, const Communicator*>> out;
  std::set<const Communicator*> listed{world_.get()};
  auto add = [&](const std::string& name, const std::shared_ptr<Communicator>& group) {
    if (group && listed.insert(group.get()).second) out.emplace_back(name, group.get());
  };
  add("node", node_);
  add("leaders", leaders_);
  add("peers", peers_);
  for (const auto& [size, group] : consecutive_) add("groups_of_" + std::to_string(size), group);
  return out;
}

}  // namespace volt
