// A Full checkpoint resumed on another number of processes: the strategy state that is kept per
// rank (the reducer and its comm hook's state, post-local-SGD's local models, SlowMo's averager)
// has no owner there, so it restarts with a warning (Note [Per-rank entries]). Asserted through
// the Trainer and volt's launcher: each warning on rank 0, naming what starts afresh, and the
// reset itself: the resumed run trains, every rank after every step, bitwise like the same
// checkpoint resumed with its strategy state removed (a strategy that starts fresh). Wrongly
// taking some rank's entry would train differently: PowerSGD would compress from the first step
// instead of running its all-reduce iterations again, post-local-SGD would skip its warm-up.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_io.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt::restart_tests {
namespace {

using testing::run_command;

std::string worker_command(const std::string& root, const std::string& extra) {
  return testing::adam_train_command(root, "--batch-size 2 --print-steps " + extra);
}

// `checkpoint` less its strategy's own state, written beside it: what a fresh strategy resumes.
std::string without_strategy_state(const std::filesystem::path& checkpoint) {
  auto state = read_checkpoint_file(checkpoint);
  auto strategy = state.child("strategy");
  EXPECT_TRUE(strategy.contains("state")) << "the checkpoint must hold strategy state, or this test proves nothing";
  strategy.erase("state");
  state.set("strategy", strategy);
  const auto stripped = checkpoint.parent_path() / "without_strategy_state.ckpt";
  CheckpointIO().save(state, stripped);
  return stripped.string();
}

struct RestartCase {
  std::string name;
  std::string strategy;
  int64_t saved_ranks, resumed_ranks;
  std::vector<std::string> warnings;  // each printed once, by rank 0, on the resume
};

class RestartsWithAWarning : public ::testing::TestWithParam<RestartCase> {};

TEST_P(RestartsWithAWarning, AndTrainsLikeAFreshStrategyFromTheSameCheckpoint) {
  const auto& c = GetParam();
  const std::string strategy = "--strategy \"" + c.strategy + "\"";
  testing::TemporaryDirectory dir;
  // 64 samples, batch 2 per rank: the checkpoint after epoch 1 falls after 32 / saved_ranks steps.
  const auto first = run_command(
      worker_command(dir.path(), strategy + " --devices " + std::to_string(c.saved_ranks) +
                                     " --max-epochs 1 --checkpoint-every-epoch"),
      240);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto checkpoint = testing::newest_checkpoint(dir.path());
  ASSERT_FALSE(checkpoint.empty()) << first.output;
  const auto stripped = without_strategy_state(checkpoint);

  const std::string resume = strategy + " --devices " + std::to_string(c.resumed_ranks) + " --max-epochs 2";
  testing::TemporaryDirectory resumed_dir, fresh_dir;
  const auto resumed = run_command(worker_command(resumed_dir.path(), resume + " --ckpt-path " + checkpoint.string()), 240);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto fresh = run_command(worker_command(fresh_dir.path(), resume + " --ckpt-path " + stripped), 240);
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;

  for (const auto& warning : c.warnings) {
    const auto at = resumed.output.find(warning);
    ASSERT_NE(at, std::string::npos) << "expected the warning \"" << warning << "\":\n" << resumed.output;
    EXPECT_EQ(resumed.output.find(warning, at + 1), std::string::npos) << "printed by rank 0 alone: " << warning;
    EXPECT_EQ(fresh.output.find(warning), std::string::npos) << "a strategy resumed without state restarts nothing";
  }
  const auto got = testing::step_lines(resumed.output);
  ASSERT_EQ(got.size(), static_cast<size_t>(c.resumed_ranks)) << resumed.output;
  testing::expect_steps_close(got, testing::step_lines(fresh.output), 0.0,
                              c.name + ": resumed with the warning vs resumed without strategy state");
}

std::string reducer_reset(int64_t saved, int64_t resumed, const std::string& averager = "") {
  return "the checkpoint's 'reducer_per_rank' holds " + std::to_string(saved) + " ranks, this run has " +
         std::to_string(resumed) + ": buckets and the comm hook's state" +
         (averager.empty() ? "" : ", and the " + averager + "'s step count and state,") + " start afresh";
}
std::string local_models_reset(int64_t saved, int64_t resumed) {
  return "the checkpoint's 'local_models_per_rank' holds " + std::to_string(saved) + " ranks, this run has " +
         std::to_string(resumed) + ": every rank continues from rank 0's model and optimizer state";
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, RestartsWithAWarning,
    ::testing::Values(
        // 16 steps before the checkpoint, past start_powersgd_iter: its error memories exist.
        RestartCase{"powersgd_2_to_3", "ddp:comm_hook=powersgd,matrix_approximation_rank=1,start_powersgd_iter=3", 2, 3,
                    {reducer_reset(2, 3)}},
        // Checkpoint after 16 steps, in the local phase (ranks differ; 16 is no multiple of 5).
        RestartCase{"post_local_sgd_2_to_4",
                    "ddp:comm_hook=post_local_sgd,start_local_sgd_iter=3,subgroup_size=1,model_averaging_period=5", 2,
                    4, {reducer_reset(2, 4, "periodic model averager"), local_models_reset(2, 4)}},
        // Checkpoint after 8 steps: after the slow momentum step at 6, before the next average.
        RestartCase{"slowmo_4_to_2", "slowmo:nprocs_per_node=1,localsgd_frequency=3,slowmo_frequency=6", 4, 2,
                    {reducer_reset(4, 2, "slow momentum averager"), local_models_reset(4, 2)}}),
    [](const ::testing::TestParamInfo<RestartCase>& info) { return info.param.name; });

}  // namespace
}  // namespace volt::restart_tests
