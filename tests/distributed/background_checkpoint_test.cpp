// Checkpoints written in the background through the Trainer and volt's launcher (the
// distributed_worker's --checkpoint-every-epoch --checkpoint-async): a run resumed from one ends
// every rank bitwise where the uninterrupted run ends, in the Full layout (rank 0 writes) and the
// Sharded one (every rank writes its shard, rank 0 renames the directory once all did); and a
// process killed (SIGKILL) while its second checkpoint is being written leaves the first one in
// place, loadable, and a resume from it ends like the uninterrupted run.
#include <gtest/gtest.h>

#include <cstdlib>

#include "checkpoint/checkpoint_io.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt::background_checkpoint_tests {
namespace {

using testing::run_command;
using testing::trained_lines;

std::string worker_command(const std::string& root, const std::string& extra) {
  return testing::adam_train_command(root, "--batch-size 4 " + extra);
}

// Every rank of `resumed` ends bitwise where the same rank of `uninterrupted` ends.
void expect_same_end(const testing::ProcessResult& resumed, const testing::ProcessResult& uninterrupted, size_t ranks,
                     const std::string& what) {
  const auto expected = trained_lines(uninterrupted.output), got = trained_lines(resumed.output);
  ASSERT_EQ(got.size(), ranks) << resumed.output;
  ASSERT_EQ(expected.size(), ranks) << uninterrupted.output;
  for (size_t r = 0; r < ranks; ++r) EXPECT_EQ(got[r].params, expected[r].params) << what << ", rank " << r;
}

class ResumeFromABackgroundWrite : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeFromABackgroundWrite, EndsEveryRankBitwiseLikeTheUninterruptedRun) {
  const std::string flags = "--strategy \"" + GetParam() + "\" --devices 2";
  testing::TemporaryDirectory whole, part;
  const auto uninterrupted = run_command(worker_command(whole.path(), flags + " --max-epochs 2"), 240);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  const auto first = run_command(
      worker_command(part.path(), flags + " --max-epochs 1 --checkpoint-every-epoch --checkpoint-async"), 240);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto checkpoint = testing::newest_checkpoint(part.path());
  ASSERT_FALSE(checkpoint.empty()) << "the end of fit finishes the write in flight:\n" << first.output;
  const auto resumed =
      run_command(worker_command(part.path(), flags + " --max-epochs 2 --ckpt-path " + checkpoint.string()), 240);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_same_end(resumed, uninterrupted, 2, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Layouts, ResumeFromABackgroundWrite,
                         ::testing::Values("ddp", "fsdp:min_num_params=1,state_dict_type=sharded"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "ddp" ? std::string("full_ddp") : std::string("sharded_fsdp");
                         });

TEST(BackgroundCheckpointKill, AKillDuringTheSecondWriteLeavesTheFirstLoadableAndResumable) {
  const std::string flags = "--strategy single_device";
  testing::TemporaryDirectory whole, part;
  const auto uninterrupted = run_command(worker_command(whole.path(), flags + " --max-epochs 3"), 240);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  // The second rename of the process is the second checkpoint's, made on the writer's thread.
  const auto killed = run_command("VOLT_CHECKPOINT_TEST_KILL=before_rename:2 " +
                                      worker_command(part.path(), flags + " --max-epochs 3 --checkpoint-every-epoch "
                                                                          "--checkpoint-async"),
                                  240);
  ASSERT_EQ(killed.exit_code, 128 + 9) << "expected SIGKILL during the second write:\n" << killed.output;
  const auto checkpoint = testing::newest_checkpoint(part.path());
  ASSERT_FALSE(checkpoint.empty()) << killed.output;
  EXPECT_EQ(read_checkpoint_file(checkpoint).get_int("global_step"), 16) << "the first epoch's checkpoint";
  const auto resumed =
      run_command(worker_command(part.path(), flags + " --max-epochs 3 --ckpt-path " + checkpoint.string()), 240);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_same_end(resumed, uninterrupted, 1, "resumed from the first checkpoint");
}

// A write in the background that fails on one rank of several (its disk full): every rank learns
// it at the next save or the end of fit and the run stops there, the failing rank with its own
// error, the others naming where it failed; no rank trains on past it.
struct FailedWriteCase {
  std::string name, strategy;
  int64_t failing_rank;
  std::string others_say;  // what the ranks whose write did not fail report
};

class AFailedBackgroundWrite : public ::testing::TestWithParam<FailedWriteCase> {};

TEST_P(AFailedBackgroundWrite, StopsEveryRankWithTheFailingRanksErrorFirst) {
  const auto& c = GetParam();
  testing::TemporaryDirectory dir;
  const auto result = testing::run_command(
      testing::adam_train_command(dir.path(), "--batch-size 2 --model mlp --devices 3 --max-epochs 3 "
                                              "--checkpoint-every-epoch --checkpoint-async --print-steps --strategy \"" +
                                                  c.strategy + "\" --fail-write-rank " + std::to_string(c.failing_rank)) +
          " 2>&1",
      240);
  EXPECT_NE(result.exit_code, 0) << result.output;
  const std::string cause = "worker: no space left on rank " + std::to_string(c.failing_rank) + "'s disk";
  EXPECT_NE(result.output.find("[rank " + std::to_string(c.failing_rank) + "] error: " + cause), std::string::npos)
      << result.output;
  for (int64_t rank = 0; rank < 3; ++rank) {
    if (rank == c.failing_rank) continue;
    const auto line = result.output.find("[rank " + std::to_string(rank) + "] error: ");
    ASSERT_NE(line, std::string::npos) << "rank " << rank << " stopped too:\n" << result.output;
    const auto end = result.output.find('\n', line);
    EXPECT_NE(result.output.substr(line, end - line).find(c.others_say), std::string::npos)
        << "rank " << rank << ":\n" << result.output;
  }
  // The first epoch's write failed; its failure is found at the second epoch's save, so no rank
  // trains into the third epoch (11 steps an epoch at batch 2 on 3 ranks: 64 samples padded to 66).
  for (const auto& [rank, steps] : testing::step_lines(result.output)) {
    ASSERT_FALSE(steps.empty());
    EXPECT_LE(steps.rbegin()->first, 2 * 11) << "rank " << rank << " trained past the save that found the failure";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, AFailedBackgroundWrite,
    ::testing::Values(FailedWriteCase{"FullOnRank0", "ddp", 0, "failed on global rank 0"},
                      FailedWriteCase{"ShardedOnRank2", "fsdp:min_num_params=20,state_dict_type=sharded", 2,
                                      "failed on another rank"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace volt::background_checkpoint_tests
