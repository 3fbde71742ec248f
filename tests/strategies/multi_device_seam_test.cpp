// Issue 33.3, the multi-device seam: a strategy that drives several devices from one process
// (Lightning's `dp`; tests/distributed/worker/replica_strategy.h), registered by name like a
// user's own, runs through the unchanged Trainer. It declares its devices before the run is
// resolved (--devices 2 starts one process with two devices), its step function is called on each
// replica, and it trains exactly as `ddp` on two processes, after every step.
#include <gtest/gtest.h>

#include "tests/distributed/worker_runs.h"

namespace volt::testing {
namespace {

std::string run_worker(const std::string& flags) {
  TemporaryDirectory dir;
  const auto result = run_command(train_command(dir.path(), flags), 180);
  EXPECT_EQ(result.exit_code, 0) << flags << ":\n" << result.output;
  return result.output;
}

TEST(MultiDeviceSeam, TwoReplicasInOneProcessEqualDdpOnTwoProcessesAfterEveryStep) {
  for (const std::string model : {"linear", "mlp"}) {
    for (const std::string optimizer : {"momentum", "adam"}) {
      const std::string common = " --print-steps --model " + model + " --optimizer " + optimizer;
      const auto ddp = step_lines(run_worker("--strategy ddp --devices 2 --batch-size 4" + common));
      const auto output = run_worker("--strategy test_replicas --devices 2 --batch-size 8" + common);
      const auto trained = trained_lines(output);
      ASSERT_EQ(trained.size(), 1u) << "test_replicas drives both devices from one process:\n" << output;
      const auto replicas = step_lines(output);
      ASSERT_EQ(ddp.size(), 2u);
      ASSERT_EQ(ddp.at(0).size(), 16u) << "64 samples, 4 per rank a step: 8 steps an epoch, 2 epochs";
      // Bitwise: DDP averages g0/2 + g1/2 (its hook divides before the sum); the replicas' mean
      // loss gives each replica g/2 exactly (a power of two), and the module adds them.
      expect_steps_close(replicas, {{0, ddp.at(0)}}, 0.0,
                         "test_replicas on 2 devices × batch 4 vs ddp on 2 processes × batch 4, " + model + ", " +
                             optimizer);
    }
  }
}

}  // namespace
}  // namespace volt::testing
