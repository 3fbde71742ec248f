#pragma once
// The run's process groups by where the processes sit: this process's node, the node leaders, and
// groups of consecutive ranks of other sizes. Post-local-SGD all-reduces gradients within the node
// group and averages models over the world; the hierarchical averager averages within groups of
// several sizes; SlowMo runs DDP within the node group and averages across nodes.
//
// ProcessTopology (process_topology.h) says where this process sits, in numbers; a Topology holds
// the communicators that follow from it. A "node" is the cluster's node (local_world_size
// processes each, grouped by node_rank) unless a node size K is given: then the nodes are the
// groups of K consecutive ranks, PyTorch's dist.new_subgroups(K). That simulates several nodes on
// one machine (tests, benchmarks) or splits a node into smaller groups.
//
// Where every node is a block of consecutive ranks of one size (nodes of a given size, and a
// cluster that numbers its ranks node by node, as launchers do), the nodes are a process mesh
// `node=N,local=K` (Note [Process mesh]) and the groups are its groups: node() is this rank's
// `local` group, peers() its `node` group, and leaders() the `node` group of local rank 0. Only a
// cluster that numbers its ranks across nodes, or runs nodes of several sizes, has its node and
// leaders' groups made from the ranks' node numbers.
//
// A group that holds every rank is the world communicator itself, not a second group of the same
// processes, so its traffic counts as the world's. Every other group is its own Communicator with
// its own counters, so bytes within a node and across the world are told apart (groups()).
//
// Built once per run by the strategy that needs it (ParallelStrategy::build_topology), which owns
// it. Not thread-safe: built and used on the training thread (counters may be read anywhere).
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/communicator.h"
#include "distributed/process_mesh.h"
#include "distributed/process_topology.h"

namespace volt {

class Topology {
 public:
  // Creates the node groups and the leaders' group over `world`. `process` is this process's
  // place in the cluster (its world size must be world->size()); `node_size`, when given, replaces
  // the cluster's nodes by groups of that many consecutive ranks, and must divide the world size
  // (ConfigurationError otherwise). [collective over `world`]
  static std::unique_ptr<Topology> build(std::shared_ptr<Communicator> world, const ProcessTopology& process,
                                         std::optional<int64_t> node_size = std::nullopt);

  Communicator& world() const { return *world_; }
  int64_t world_size() const { return world_->size(); }
  // Processes per node (the given node size, or the cluster's processes per node).
  int64_t node_size() const { return node_size_; }
  int64_t num_nodes() const { return num_nodes_; }
  // This process's node, in [0, num_nodes()): nodes numbered by their lowest rank.
  int64_t node_index() const { return node_index_; }
  // Whether the nodes are groups of a given size rather than the cluster's.
  bool simulated() const { return simulated_; }

  // This node's processes (the world when one node holds them all).
  Communicator& node() const { return *node_; }
  // The lowest rank of every node (the world when every node has one process); nullptr on the
  // other ranks.
  Communicator* leaders() const { return leaders_; }

  // This process's group of `size` consecutive ranks (Communicator::new_subgroups): the node group
  // or the world where that is the same set of ranks, otherwise groups created by the first call
  // for `size` and kept. `size` must divide the world size. Every rank calls it with the same sizes
  // in the same order. [collective the first time for a size]
  Communicator& consecutive_group(int64_t size);

  // This process's peers on the other nodes: the ranks at its place (its index among its node's
  // ranks) in every node, HSDP's replicas (the leaders' group is rank 0's). Needs nodes of one
  // size (ConfigurationError otherwise); the rank alone on one node. Every rank calls it.
  // [collective the first time, unless the nodes are a mesh(), which built it]
  Communicator& peers();

  // The nodes as the mesh `node=num_nodes(),local=node_size()`, when every node is a block of
  // consecutive ranks of one size; nullptr otherwise.
  const ProcessMesh* mesh() const { return mesh_.get(); }

  // Every group of this process other than the world, by name, for metrics: "node", "leaders"
  // (on the leaders), "peers" (once made), "groups_of_<size>" (consecutive_group). A group with
  // two of these names is listed under each (on a mesh, a leader's "leaders" is its "peers").
  std::vector<std::pair<std::string, const Communicator*>> groups() const;

 private:
  Topology() = default;
  // Each node's ranks, in rank order, by node index.
  std::vector<std::vector<int64_t>> nodes() const;

  // The nodes as a mesh when they are consecutive blocks of one size (build sets it).
  void arrange_as_mesh();

  std::shared_ptr<Communicator> world_;
  std::unique_ptr<ProcessMesh> mesh_;
  // This rank's groups: the mesh's, or (other nodes) ones made here and kept in `made_`.
  Communicator* node_ = nullptr;
  Communicator* leaders_ = nullptr;
  Communicator* peers_ = nullptr;  // the mesh's, or made by the first peers()
  std::vector<std::shared_ptr<Communicator>> made_;
  std::map<int64_t, std::shared_ptr<Communicator>> consecutive_;  // by group size
  std::vector<int64_t> node_of_rank_;  // node index of every rank
  int64_t node_size_ = 1, num_nodes_ = 1, node_index_ = 0;
  bool simulated_ = false;
};

}  // namespace volt
