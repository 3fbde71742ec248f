// A checkpoint written inside an accumulation window, through the Trainer and volt's launcher (the
// worker saves after training batch 4 of epoch 0; windows of 2, so one micro-batch of the window
// that closes at batch 5 is in):
// - resumed with the same strategy and world size, the run continues the window with every rank's
//   gradients so far and trains, every rank after every step, bitwise like the uninterrupted run:
//   fsdp (whose parameters are released between steps while their window gradients stay whole)
//   in the full and the sharded layout, and ddp;
// - resumed on another number of ranks whose batches do not divide the rest of the epoch (the
//   last batch pads), the window's gradients are dropped with one warning on rank 0, and the
//   sharded checkpoint trains bitwise like the full checkpoint of the same run resumed there.
#include <gtest/gtest.h>

#include <string>

#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt::window_checkpoint_tests {
namespace {

using testing::run_command;

constexpr int64_t kSaveAfterBatch = 4;  // batches 0-3 close two windows; batch 4 opens the third

std::string window_command(const std::string& root, const std::string& strategy, int64_t devices,
                           const std::string& extra) {
  return testing::adam_train_command(root, "--batch-size 2 --model mlp --accumulate-grad-batches 2 --max-epochs 2 "
                                           "--print-steps --strategy \"" + strategy + "\" --devices " +
                                               std::to_string(devices) + " " + extra);
}

// Trains uninterrupted, saving inside the window along the way; its output.
std::string train_saving_in_window(const std::string& root, const std::string& strategy, int64_t devices,
                                   const std::string& checkpoint) {
  const auto result =
      run_command(window_command(root, strategy, devices,
                                 "--save-after-batch " + std::to_string(kSaveAfterBatch) +
                                     " --save-after-batch-path " + checkpoint),
                  240);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return result.output;
}

std::string resume(const std::string& root, const std::string& strategy, int64_t devices, const std::string& checkpoint) {
  const auto result = run_command(window_command(root, strategy, devices, "--ckpt-path " + checkpoint), 240);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return result.output;
}

// The steps of `steps` from `first` on.
testing::StepParameters from_step(testing::StepParameters steps, int64_t first) {
  for (auto& [rank, by_step] : steps) std::erase_if(by_step, [first](const auto& item) { return item.first < first; });
  return steps;
}

const std::string kDropped = "the window's gradients so far are dropped";
const std::string kDroppedSharded = "the gradients accumulated so far in the open accumulation window are dropped";

struct SameWorldCase {
  std::string name;
  std::string strategy;
};

class CheckpointInsideAWindow : public ::testing::TestWithParam<SameWorldCase> {};

TEST_P(CheckpointInsideAWindow, ResumesTheWindowBitwiseOnTheSameRanks) {
  const auto& c = GetParam();
  testing::TemporaryDirectory dir;
  const std::string checkpoint = dir.file("window.ckpt");
  const auto uninterrupted = testing::step_lines(train_saving_in_window(dir.file("first"), c.strategy, 2, checkpoint));
  const auto resumed_output = resume(dir.file("resumed"), c.strategy, 2, checkpoint);
  EXPECT_EQ(resumed_output.find(kDropped), std::string::npos) << resumed_output;
  EXPECT_EQ(resumed_output.find(kDroppedSharded), std::string::npos) << resumed_output;
  const auto resumed = testing::step_lines(resumed_output);
  ASSERT_EQ(resumed.size(), 2u) << resumed_output;
  // Two windows closed before the save: the resumed run's first step is the open window's.
  ASSERT_EQ(resumed.begin()->second.begin()->first, 3) << resumed_output;
  testing::expect_steps_close(resumed, from_step(uninterrupted, 3), 0.0,
                              c.name + ": resumed inside the window vs uninterrupted");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CheckpointInsideAWindow,
    ::testing::Values(SameWorldCase{"FsdpFull", "fsdp:min_num_params=20"},
                      SameWorldCase{"FsdpSharded", "fsdp:min_num_params=20,state_dict_type=sharded"},
                      SameWorldCase{"Ddp", "ddp"}),
    [](const auto& info) { return info.param.name; });

TEST(CheckpointInsideAWindowElsewhere, DropsTheWindowWithOneWarningAndTheLayoutsAgree) {
  testing::TemporaryDirectory dir;
  const std::string full = dir.file("full.ckpt"), sharded = dir.file("sharded.ckpt");
  train_saving_in_window(dir.file("full_run"), "fsdp:min_num_params=20", 2, full);
  train_saving_in_window(dir.file("sharded_run"), "fsdp:min_num_params=20,state_dict_type=sharded", 2, sharded);
  // 3 ranks of batch 2 over the 44 samples left of epoch 0: 8 batches a rank, the last padded.
  const auto from_full = resume(dir.file("from_full"), "fsdp:min_num_params=20", 3, full);
  const auto from_sharded = resume(dir.file("from_sharded"), "fsdp:min_num_params=20", 3, sharded);
  for (const auto& [output, warning] : {std::pair{from_full, kDropped}, std::pair{from_sharded, kDroppedSharded}}) {
    const auto at = output.find(warning);
    ASSERT_NE(at, std::string::npos) << output;
    EXPECT_EQ(output.find(warning, at + 1), std::string::npos) << "printed by rank 0 alone:\n" << output;
    EXPECT_NE(output.find("in 8 more batches per rank"), std::string::npos) << output;
  }
  const auto steps = testing::step_lines(from_sharded);
  ASSERT_EQ(steps.size(), 3u) << from_sharded;
  testing::expect_steps_close(steps, testing::step_lines(from_full), 0.0,
                              "resumed on 3 ranks from the sharded checkpoint vs from the full one");
}

}  // namespace
}  // namespace volt::window_checkpoint_tests
