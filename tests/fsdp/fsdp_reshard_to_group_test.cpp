// Note [Resharding to a group]: `fsdp:reshard_after_forward=G` (FSDP2's int, ZeRO++'s hpZ) keeps
// 1/G of each unit after its forward on each rank, so that the backward's all-gather runs within
// the rank's group of G consecutive ranks. Four ranks with G = 2 train like ddp within 1e-6 after
// every step (flat and per parameter, with backward prefetch); a step's backward gathers go over
// the groups, not the world (counted by the groups' Communicators); bad values stop the run before
// it starts, saying what to do.
#include <gtest/gtest.h>

#include "tests/distributed/worker_runs.h"
#include "tests/support/regression_problem.h"

namespace volt {
namespace {

using testing::run_command;
using testing::train_command;

TEST(FSDPReshardToGroup, FourRanksInGroupsOfTwoTrainLikeDDPAfterEveryStep) {
  testing::expect_steps_like("ddp",
                             {"fsdp:min_num_params=20,reshard_after_forward=2",
                              "fsdp:min_num_params=20,reshard_after_forward=2,layout=per_parameter",
                              "fsdp:min_num_params=20,reshard_after_forward=2,backward_prefetch=true"},
                             4, "adam", "--model mlp", 1e-6);
}

// The smallest increase of the cumulative `column` from one logged step to the next: a training
// step's (an epoch's end adds validation's gathers). -1 when fewer than two steps logged it.
double step_increase(const std::string& root, const std::string& column) {
  std::vector<double> values;
  for (const auto& row : testing::read_csv(root + "/volt_logs/version_0/metrics.csv")) {
    if (row.count(column) && !row.at(column).empty()) values.push_back(std::stod(row.at(column)));
  }
  double smallest = -1;
  for (size_t i = 1; i < values.size(); ++i) {
    if (smallest < 0 || values[i] - values[i - 1] < smallest) smallest = values[i] - values[i - 1];
  }
  return smallest;
}

// The MLP's units on 4 ranks: the root (gathered once, kept until its backward) and body.0, body.2
// (gathered for forward and again for backward). With reshard_after_forward=true a step all-gathers
// 5 times over the world; with 2, the two backward gathers run within the groups of 2.
TEST(FSDPReshardToGroup, TheBackwardGathersStayInTheGroups) {
  for (const auto& [strategy, world_gathers, group_gathers] : std::vector<std::tuple<std::string, double, double>>{
           {"fsdp:min_num_params=20", 5, 0}, {"fsdp:min_num_params=20,reshard_after_forward=2", 3, 2}}) {
    testing::TemporaryDirectory dir;
    const auto result = run_command(
        train_command(dir.path(), "--strategy " + strategy + " --devices 4 --model mlp --batch-size 4"), 240);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(step_increase(dir.path(), "comm/all_gather_calls"), world_gathers) << strategy;
    const double in_groups = step_increase(dir.path(), "comm/node/calls");  // the groups do nothing else
    EXPECT_EQ(std::max(in_groups, 0.0), group_gathers) << strategy;
  }
}

TEST(FSDPReshardToGroup, ABadGroupIsRefusedBeforeTheRunSayingWhatToDo) {
  EXPECT_NE(testing::trainer_construction_error("fsdp:reshard_after_forward=3", 4).find("must divide the 4 processes"),
            std::string::npos);
  EXPECT_NE(testing::trainer_construction_error("fsdp:reshard_after_forward=4", 4)
                .find("4 is reshard_after_forward=true"),
            std::string::npos);
  EXPECT_NE(testing::trainer_construction_error("fsdp:reshard_after_forward=half", 4).find("a group size of at least 2"),
            std::string::npos);
  // 1 and 0 are a boolean option's spellings, as for every other key.
  EXPECT_NO_THROW(testing::construct_quiet_trainer("fsdp:reshard_after_forward=0", 4));
  EXPECT_NE(testing::trainer_construction_error("fsdp:reshard_after_forward=2,sharding_strategy=SHARD_GRAD_OP", 4)
                .find("does not apply to sharding_strategy=SHARD_GRAD_OP"),
            std::string::npos);
  EXPECT_NE(testing::trainer_construction_error("fsdp:reshard_after_forward=2,sharding_strategy=NO_SHARD", 4)
                .find("does not apply"),
            std::string::npos);
  EXPECT_NE(testing::trainer_construction_error(
                "fsdp:reshard_after_forward=2,sharding_strategy=HYBRID_SHARD,nprocs_per_node=2", 4)
                .find("does not apply to sharding_strategy=HYBRID_SHARD"),
            std::string::npos);
}

}  // namespace
}  // namespace volt
