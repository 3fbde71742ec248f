// The Trainer at its defaults reads no tensor value on the host inside a training step (Note
// [Metrics read when asked]): logged values, the clipped norm and the loss stay tensors, and are
// read only when the progress bar refreshes or a logger writes. On a GPU each such read waits for
// the device; on the CPU the same reads run the same operator (aten::_local_scalar_dense), so the
// CPU run checks the same code paths (tests/cuda/host_sync_cuda_test.cpp runs it on a GPU).
#include <gtest/gtest.h>

#include "tests/support/host_sync_run.h"

namespace volt::testing {
namespace {

TEST(HostSync, TheTrainerAtItsDefaultsReadsNoValueInsideAStep) {
  const HostSyncRun run = train_observing_host_reads(false);
  ASSERT_EQ(run.global_step, 100);
  ASSERT_EQ(run.train_batches, 200);
  for (const auto& site : run.unasked_reads_in_steps()) ADD_FAILURE() << "a host read inside a training step, at: " << site;
  // What was read: the bar's value at each of its refreshes (a line per 5% off a terminal) and the
  // logged value at each write (every 50 steps; the scope is also entered at validation and epoch
  // end), one value each.
  const auto reads = static_cast<int64_t>(run.reads_in_steps().size());
  EXPECT_GE(run.logger_writes, 2);
  EXPECT_GE(run.bar_refreshes, 20);
  EXPECT_LE(reads, run.bar_refreshes + run.logger_writes);
  EXPECT_LT(reads, run.train_batches / 8);
}

TEST(HostSync, NamesTheSiteOfAReadInTheUsersStep) {
  const HostSyncRun run = train_observing_host_reads(true);
  int64_t in_training_step = 0;
  for (const auto& site : run.unasked_reads_in_steps()) in_training_step += site == "volt::train_batch > volt::training_step";
  EXPECT_EQ(in_training_step, 200);
}

}  // namespace
}  // namespace volt::testing
