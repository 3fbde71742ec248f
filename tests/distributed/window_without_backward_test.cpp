// Issue 21.2: an accumulation window whose closing micro-batch returns no loss (on every rank)
// used to step on gradients the earlier micro-batches accumulated under no_sync, never averaged:
// the ranks drifted apart and the run reported success. Now the strategy synchronizes them before
// the step (Note [A window that closes without backward]); under every data-parallel strategy, 2
// ranks × batch 8 must equal one process × batch 16 with the same windows, and the ranks must
// hold the same weights. DDP's reducer reduces such a window through its comm hook
// (tests/ddp/post_local_sgd_test.cpp: the subgroup in post-local-SGD's local phase, and the hooks
// count it).
#include <gtest/gtest.h>

#include "tests/distributed/worker_runs.h"

namespace volt::testing {
namespace {

TEST(WindowWithoutBackward, EveryStrategySynchronizesTheAccumulatedGradientsBeforeTheStep) {
  // Windows of 2 whose second micro-batch (batches 1, 3, 5, ...) returns no loss.
  const std::string windows = " --accumulate-grad-batches 2 --skip-every 2 --optimizer momentum";
  const auto reference = one_process_params(windows);
  ASSERT_FALSE(reference.empty());
  for (const std::string strategy : {"ddp", "ddp:gradient_as_bucket_view=true,static_graph=true",
                                     "ddp:find_unused_parameters=true", "ddp:shard_optimizer=true", "ddp_sharded",
                                     // issue 34.5: FSDP's units; SlowMo's node group (one node, no slow
                                     // momentum: DDP within it); post-local-SGD's hook before its switch
                                     "fsdp", "fsdp:sharding_strategy=SHARD_GRAD_OP",
                                     "slowmo:nprocs_per_node=2,slowmo_momentum=0.0",
                                     "ddp:comm_hook=post_local_sgd,start_local_sgd_iter=1000,model_averaging_period=4"}) {
    TemporaryDirectory dir;
    const auto result = run_command(
        train_command(dir.path(), "--batch-size 8 --devices 2 --strategy \"" + strategy + "\"" + windows), 180);
    ASSERT_EQ(result.exit_code, 0) << strategy << ":\n" << result.output;
    const auto lines = trained_lines(result.output);
    ASSERT_EQ(lines.size(), 2u) << strategy << ":\n" << result.output;
    for (const auto& line : lines) {
      ASSERT_EQ(line.params.size(), reference.size()) << strategy;
      for (size_t i = 0; i < reference.size(); ++i) {
        EXPECT_NEAR(line.params[i], reference[i], 1e-5)
            << strategy << ": rank " << line.rank << ", parameter " << i << " vs one process with the global batch";
      }
    }
  }
}

}  // namespace
}  // namespace volt::testing
