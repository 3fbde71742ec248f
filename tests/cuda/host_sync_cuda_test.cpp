// On a GPU, the Trainer at its defaults reads no value on the host inside a training step, in
// 32-true and bf16-mixed (tests/trainer/host_sync_test.cpp is the CPU run and says what is read).
// 16-mixed's GradScaler reads whether the gradients were finite once per step; the test says where.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_support.h"
#include "tests/support/host_sync_run.h"

namespace volt::testing {
namespace {

TEST(CudaHostSync, TheStepReadsNothingInFloat32AndBfloat16Mixed) {
  VOLT_REQUIRE_CUDA();
  for (const std::string precision : {"32-true", "bf16-mixed"}) {
    const HostSyncRun run = train_observing_host_reads(false, "cuda", precision);
    ASSERT_EQ(run.global_step, 100) << precision;
    for (const auto& site : run.unasked_reads_in_steps()) {
      ADD_FAILURE() << precision << ": a host read inside a training step, at: " << site;
    }
    EXPECT_LT(static_cast<int64_t>(run.reads_in_steps().size()), run.train_batches / 8) << precision;
  }
}

TEST(CudaHostSync, Float16MixedReadsOnlyTheGradScalersVerdict) {
  VOLT_REQUIRE_CUDA();
  const HostSyncRun run = train_observing_host_reads(false, "cuda", "16-mixed");
  // Its step (skip or not); its update counts a skipped step on the device.
  for (const auto& site : run.unasked_reads_in_steps()) {
    EXPECT_NE(site.find("volt::optimizer_step"), std::string::npos)
        << "a host read outside the GradScaler's step, at: " << site;
  }
  EXPECT_LE(static_cast<int64_t>(run.unasked_reads_in_steps().size()), run.global_step);
}

}  // namespace
}  // namespace volt::testing
