// Subgroups and the topology built on them, with ranks as threads over Gloo on 127.0.0.1:
// new_subgroups splits consecutive ranks; a Topology finds the cluster's nodes (interleaved
// numbering included) or simulates nodes of a given size, picks the leaders, reuses the world or
// the node group where a group has the same ranks, arranges nodes of consecutive ranks as a `node × local`
// process mesh whose groups are the node groups and the peers, and keeps each group's bytes apart from the
// world's; sizes that do not divide the world fail on every rank with a clear message.
#include <gtest/gtest.h>

#include "core/error.h"
#include "distributed/topology.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/test_support.h"

namespace volt::topology_tests {
namespace {

using testing::loopback_options;
using testing::run_thread_ranks;

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t rank = 0; rank < errors.size(); ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

// Sum of (global rank + 1) over `group`.
double sum_of_ranks(Communicator& group) {
  auto t = torch::tensor({static_cast<double>(group.global_ranks()[static_cast<size_t>(group.rank())] + 1)}, torch::kDouble);
  group.all_reduce(t);
  return t.item<double>();
}

ProcessTopology process_of(int64_t rank, int64_t world, int64_t node_rank, int64_t per_node) {
  return {.global_rank = rank, .world_size = world, .local_rank = rank % per_node, .local_world_size = per_node,
          .node_rank = node_rank, .num_nodes = world / per_node};
}

TEST(SubgroupsTest, NewSubgroupsSplitsConsecutiveRanks) {
  expect_no_errors(run_thread_ranks(4, [](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, 4, port));
    auto pairs = world->new_subgroups(2);
    ASSERT_NE(pairs, nullptr);
    EXPECT_EQ(pairs->size(), 2);
    EXPECT_EQ(pairs->global_ranks(), rank < 2 ? (std::vector<int64_t>{0, 1}) : (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(sum_of_ranks(*pairs), rank < 2 ? 3.0 : 7.0);
    auto singles = world->new_subgroups(1);
    EXPECT_EQ(singles->size(), 1);
    EXPECT_EQ(sum_of_ranks(*singles), static_cast<double>(rank + 1));
    const auto message = testing::configuration_error_of([&] { world->new_subgroups(3); });
    EXPECT_NE(message.find("new_subgroups expects a group size that divides the group's size 4, got 3"),
              std::string::npos) << message;
    EXPECT_EQ(sum_of_ranks(*world), 10.0) << "the failed call communicated nothing";
  }));
}

TEST(TopologyTest, SimulatedNodesOfTwoOnFourRanks) {
  expect_no_errors(run_thread_ranks(4, [](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, 4, port));
    // One cluster node of four processes, split into "nodes" of two.
    auto topology = Topology::build(world, process_of(rank, 4, 0, 4), 2);
    EXPECT_TRUE(topology->simulated());
    EXPECT_EQ(topology->node_size(), 2);
    EXPECT_EQ(topology->num_nodes(), 2);
    EXPECT_EQ(topology->node_index(), rank / 2);
    EXPECT_EQ(topology->node().global_ranks(), rank < 2 ? (std::vector<int64_t>{0, 1}) : (std::vector<int64_t>{2, 3}));
    if (rank % 2 == 0) {
      ASSERT_NE(topology->leaders(), nullptr);
      EXPECT_EQ(topology->leaders()->global_ranks(), (std::vector<int64_t>{0, 2}));
      EXPECT_EQ(sum_of_ranks(*topology->leaders()), 4.0);
    } else {
      EXPECT_EQ(topology->leaders(), nullptr);
    }
    // Groups of the node's size are the node group; of the world's size, the world itself.
    EXPECT_EQ(&topology->consecutive_group(2), &topology->node());
    EXPECT_EQ(&topology->consecutive_group(4), world.get());
    Communicator& singles = topology->consecutive_group(1);
    EXPECT_EQ(&topology->consecutive_group(1), &singles) << "made once, then kept";
    EXPECT_EQ(singles.size(), 1);

    // Each group counts its own bytes: 8 bytes within the node, none of them in the world's.
    world->reset_counters();
    const auto node_before = topology->node().counters().total_bytes();
    sum_of_ranks(topology->node());
    EXPECT_EQ(topology->node().counters().total_bytes() - node_before, 8);
    EXPECT_EQ(world->counters().total_bytes(), 0);

    std::vector<std::string> names;
    for (const auto& [name, group] : topology->groups()) names.push_back(name);
    EXPECT_EQ(names, rank % 2 == 0 ? (std::vector<std::string>{"node", "leaders", "peers", "groups_of_1"})
                                   : (std::vector<std::string>{"node", "peers", "groups_of_1"}));

    // The nodes are the mesh node=2,local=2: the node group is its `local` group, the peers its
    // `node` group, and a leader's peers are the leaders.
    ASSERT_NE(topology->mesh(), nullptr);
    EXPECT_EQ(to_string(topology->mesh()->dimensions()), "node=2,local=2");
    EXPECT_EQ(&topology->node(), &topology->mesh()->group("local"));
    EXPECT_EQ(&topology->peers(), &topology->mesh()->group("node"));
    EXPECT_EQ(topology->peers().global_ranks(), rank % 2 == 0 ? (std::vector<int64_t>{0, 2}) : (std::vector<int64_t>{1, 3}));
    if (rank % 2 == 0) EXPECT_EQ(topology->leaders(), &topology->peers());
  }));
}

TEST(TopologyTest, ClusterNodesMayBeNumberedInAnyOrder) {
  expect_no_errors(run_thread_ranks(4, [](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, 4, port));
    // Ranks 0 and 2 on node 1, ranks 1 and 3 on node 0 (node order follows the node rank).
    const int64_t node_rank = rank % 2 == 0 ? 1 : 0;
    auto topology = Topology::build(world, process_of(rank, 4, node_rank, 2));
    EXPECT_FALSE(topology->simulated());
    EXPECT_EQ(topology->node_index(), node_rank);
    EXPECT_EQ(topology->node().global_ranks(), node_rank == 1 ? (std::vector<int64_t>{0, 2}) : (std::vector<int64_t>{1, 3}));
    EXPECT_EQ(sum_of_ranks(topology->node()), node_rank == 1 ? 4.0 : 6.0);
    EXPECT_EQ(topology->mesh(), nullptr) << "nodes that are not blocks of consecutive ranks are no mesh";
    EXPECT_EQ(topology->peers().global_ranks(), rank < 2 ? (std::vector<int64_t>{0, 1}) : (std::vector<int64_t>{2, 3}));
    // Consecutive pairs are not the nodes here: a group of their own.
    Communicator& pair = topology->consecutive_group(2);
    EXPECT_NE(&pair, &topology->node());
    EXPECT_EQ(sum_of_ranks(pair), rank < 2 ? 3.0 : 7.0);
  }));
}

TEST(TopologyTest, OneNodeIsTheWorldAndOneProcessPerNodeMakesEveryRankALeader) {
  expect_no_errors(run_thread_ranks(2, [](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, 2, port));
    auto one_node = Topology::build(world, process_of(rank, 2, 0, 2));
    EXPECT_EQ(&one_node->node(), world.get());
    EXPECT_EQ(one_node->num_nodes(), 1);
    if (rank == 0) {
      ASSERT_NE(one_node->leaders(), nullptr);
      EXPECT_EQ(one_node->leaders()->size(), 1);
    } else {
      EXPECT_EQ(one_node->leaders(), nullptr);
    }
    auto singles = Topology::build(world, process_of(rank, 2, 0, 2), 1);
    EXPECT_EQ(singles->node().size(), 1);
    EXPECT_EQ(singles->leaders(), world.get());
    EXPECT_EQ(singles->groups().size(), 1u) << "only the node group differs from the world";
  }));
}

TEST(TopologyTest, ANodeSizeThatDoesNotDivideTheWorldFailsOnEveryRank) {
  const auto errors = run_thread_ranks(4, [](int64_t rank, int64_t port) {
    auto world = Communicator::connect(loopback_options(rank, 4, port));
    try {
      Topology::build(world, process_of(rank, 4, 0, 4), 3);
    } catch (const ConfigurationError& e) {
      EXPECT_NE(std::string(e.what()).find("expected a node size (subgroup size) that divides the world size 4, "
                                           "got 3"),
                std::string::npos) << e.what();
      world->barrier();  // still in step: nothing was communicated
      return;
    }
    ADD_FAILURE() << "rank " << rank << " accepted node size 3 of 4";
  });
  expect_no_errors(errors);
}

}  // namespace
}  // namespace volt::topology_tests
