// Note [HYBRID_SHARD]: `fsdp:sharding_strategy=HYBRID_SHARD` shards within a node and replicates
// across nodes. Four ranks as two simulated nodes of two (nprocs_per_node=2) train like ddp within
// 1e-6 after every step (ring reduce-scatter in the node plus the peers' all-reduce, against ddp's
// ring all-reduce: other summation orders), with units by size or by type (also in the
// per-parameter layout), with and without resharding; the gradients cross nodes only through the peers' group, whose bytes
// per step are the shards' (1/2 of the units' gradients per rank), counted by its Communicator; on
// one node it warns and is FULL_SHARD bit for bit; a resume from its full checkpoint is bitwise
// the uninterrupted run; bad settings stop the run saying what to do.
#include <gtest/gtest.h>

#include "tests/distributed/worker_runs.h"
#include "tests/support/regression_problem.h"

namespace volt {
namespace {

using testing::run_command;
using testing::run_print_steps;
using testing::step_lines;
using testing::train_command;

TEST(FSDPHybridShard, FourRanksAsTwoNodesTrainLikeDDPAfterEveryStep) {
  testing::expect_steps_like(
      "ddp",
      {"fsdp:min_num_params=20,sharding_strategy=HYBRID_SHARD,nprocs_per_node=2",
       "fsdp:min_num_params=20,sharding_strategy=HYBRID_SHARD,nprocs_per_node=2,reshard_after_forward=false"},
      4, "adam", "--model mlp", 1e-6);
  testing::expect_steps_like(
      "ddp",
      {"fsdp:wrap=RegressionBlock,sharding_strategy=HYBRID_SHARD,nprocs_per_node=2",
       "fsdp:wrap=RegressionBlock,sharding_strategy=HYBRID_SHARD,nprocs_per_node=2,layout=per_parameter"},
      4, "adam", "--model blocks", 1e-6);
}

// The worker's train mode on the MLP under `strategy` on `ranks`, with `extra` flags (expects success).
testing::ProcessResult run_mlp(const testing::TemporaryDirectory& dir, const std::string& strategy, int64_t ranks,
                               const std::string& extra = "") {
  const auto result = run_command(train_command(dir.path(), "--strategy " + strategy + " --devices " +
                                                                std::to_string(ranks) +
                                                                " --optimizer adam --model mlp --batch-size 4 " + extra),
                                  240);
  EXPECT_EQ(result.exit_code, 0) << strategy << ":\n" << result.output;
  return result;
}

TEST(FSDPHybridShard, GradientsCrossNodesThroughThePeersGroupOnly) {
  testing::TemporaryDirectory dir;
  run_mlp(dir, "fsdp:min_num_params=20,sharding_strategy=HYBRID_SHARD,nprocs_per_node=2", 4);
  const double peers = testing::last_logged(dir.path(), "comm/peers/step_bytes");
  const double node = testing::last_logged(dir.path(), "comm/node/step_bytes");
  const double shards = testing::last_logged(dir.path(), "fsdp/shard_bytes");
  // A step all-reduces each unit's float32 shard gradient once with the other node: the payload
  // is the rank's shards' bytes, no more.
  EXPECT_EQ(peers, shards) << "the shards' gradients, once a step";
  EXPECT_GT(node, 2 * peers) << "the gathers and reduce-scatters stay in the node";
}

TEST(FSDPHybridShard, OnOneNodeItWarnsAndIsFullShardBitForBit) {
  testing::TemporaryDirectory dir;
  const auto result = run_mlp(dir, "fsdp:min_num_params=20,sharding_strategy=HYBRID_SHARD", 2, "--print-steps");
  EXPECT_NE(result.output.find("sharding_strategy=HYBRID_SHARD with all 2 processes on one node shards over all of "
                               "them and replicates nothing, which is FULL_SHARD"),
            std::string::npos)
      << result.output;
  testing::expect_steps_close(step_lines(result.output),
                              step_lines(run_print_steps("fsdp:min_num_params=20", 2, "adam", "--model mlp")), 0.0,
                              "HYBRID_SHARD on one node vs FULL_SHARD");
}

// A full checkpoint under HYBRID_SHARD (each unit gathered within rank 0's node, written by rank
// 0): the run resumed from it is bit for bit the uninterrupted one, on every rank of both nodes.
TEST(FSDPHybridShard, AResumeFromItsFullCheckpointIsBitwiseTheUninterruptedRun) {
  testing::TemporaryDirectory first, whole;
  const std::string flags = "--strategy fsdp:min_num_params=20,sharding_strategy=HYBRID_SHARD,nprocs_per_node=2 "
                            "--model mlp --devices 4 --optimizer adam --batch-size 4 --checkpoint-every-epoch";
  testing::trained(first.path(), flags, 1);
  const auto checkpoint = testing::newest_checkpoint(first.path());
  ASSERT_FALSE(checkpoint.empty());
  const auto resumed = testing::trained(first.path(), flags + " --ckpt-path " + checkpoint.string(), 2);
  const auto uninterrupted = testing::trained(whole.path(), flags, 2);
  ASSERT_EQ(resumed.size(), 4u);
  ASSERT_EQ(uninterrupted.size(), 4u);
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(resumed[r].params, uninterrupted[r].params) << "rank " << r;
}

// Checked when the Trainer is constructed, before any process starts.
TEST(FSDPHybridShard, BadSettingsFailAtConstructionSayingWhatToDo) {
  EXPECT_NE(testing::trainer_construction_error("fsdp:nprocs_per_node=2", 2)
                .find("nprocs_per_node sizes the nodes of sharding_strategy=HYBRID_SHARD"),
            std::string::npos);
  EXPECT_NE(testing::trainer_construction_error("fsdp:sharding_strategy=HYBRID_SHARD,state_dict_type=sharded", 2)
                .find("HYBRID_SHARD writes full checkpoints only"),
            std::string::npos);
  EXPECT_NE(testing::trainer_construction_error("fsdp:sharding_strategy=HYBRID_SHARD,nprocs_per_node=3", 4)
                .find("expected a world size divisible by nprocs_per_node=3, got 4 processes"),
            std::string::npos);
}

}  // namespace
}  // namespace volt
