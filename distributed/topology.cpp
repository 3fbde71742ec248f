#include "distributed/topology.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace volt {

namespace {

// Every rank creates every group of `groups`, in order (new_group is a collective over the world's
// numbering of groups; only members connect); returns this rank's (null when it is in none), the
// world itself for a group of every rank, keeping a made one in `made`.
Communicator* own_group(const std::shared_ptr<Communicator>& world, const std::vector<std::vector<int64_t>>& groups,
                        std::vector<std::shared_ptr<Communicator>>& made) {
  Communicator* mine = nullptr;
  for (const auto& members : groups) {
    if (static_cast<int64_t>(members.size()) == world->size()) {
      mine = world.get();
      continue;
    }
    if (auto group = world->new_group(members)) {
      mine = group.get();
      made.push_back(std::move(group));
    }
  }
  return mine;
}

}  // namespace

std::vector<std::vector<int64_t>> Topology::nodes() const {
  std::vector<std::vector<int64_t>> nodes(static_cast<size_t>(num_nodes_));
  for (size_t r = 0; r < node_of_rank_.size(); ++r) {
    nodes[static_cast<size_t>(node_of_rank_[r])].push_back(static_cast<int64_t>(r));
  }
  return nodes;
}

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
  const auto nodes = t.nodes();
  t.node_size_ = static_cast<int64_t>(nodes[static_cast<size_t>(t.node_index_)].size());
  t.arrange_as_mesh();
  if (t.mesh_) return topology;
  t.node_ = own_group(t.world_, nodes, t.made_);
  std::vector<int64_t> leaders;
  for (const auto& node : nodes) leaders.push_back(node.front());
  t.leaders_ = own_group(t.world_, {leaders}, t.made_);
  return topology;
}

void Topology::arrange_as_mesh() {
  const int64_t n = world_size();
  for (int64_t r = 0; r < n; ++r) {
    if (node_of_rank_[static_cast<size_t>(r)] != r / node_size_) return;  // not consecutive blocks of one size
  }
  if (num_nodes_ * node_size_ != n) return;
  mesh_ = ProcessMesh::build(world_, {{.name = "node", .size = num_nodes_}, {.name = "local", .size = node_size_}});
  node_ = &mesh_->group("local");
  peers_ = &mesh_->group("node");
  if (mesh_->coordinate("local") == 0) leaders_ = peers_;
}

Communicator& Topology::consecutive_group(int64_t size) {
  const int64_t n = world_size();
  check<ConfigurationError>(size >= 1 && n % size == 0, "Topology: expected a group size that divides the world "
                            "size ", n, ", got ", size, "; choose one of the divisors of ", n);
  if (size == n) return *world_;
  if (mesh_ && size == node_size_) return *node_;  // the nodes are these groups
  auto& group = consecutive_[size];
  if (!group) group = world_->new_subgroups(size);
  return *group;
}

Communicator& Topology::peers() {
  if (peers_) return *peers_;
  const auto nodes = this->nodes();
  for (const auto& node : nodes) {
    check<ConfigurationError>(node.size() == nodes.front().size(), "Topology: replicas across nodes need nodes of one "
                              "size; node 0 has ", nodes.front().size(), " processes and another ", node.size(),
                              "; run as many processes on every node");
  }
  std::vector<std::vector<int64_t>> places(nodes.front().size());
  for (size_t place = 0; place < places.size(); ++place) {
    for (const auto& node : nodes) places[place].push_back(node[place]);
  }
  peers_ = own_group(world_, places, made_);
  VOLT_INTERNAL_ASSERT(peers_ != nullptr, "Topology::peers: this rank is in no place's group");
  return *peers_;
}

std::vector<std::pair<std::string, const Communicator*>> Topology::groups() const {
  std::vector<std::pair<std::string, const Communicator*>> out;
  auto add = [&](const std::string& name, const Communicator* group) {
    if (group && group != world_.get()) out.emplace_back(name, group);
  };
  add("node", node_);
  add("leaders", leaders_);
  add("peers", peers_);
  for (const auto& [size, group] : consecutive_) add("groups_of_" + std::to_string(size), group.get());
  return out;
}

}  // namespace volt
