// The Fabric against the Trainer (issue 20): the same model, data, seed and strategy trained by
// the distributed_worker's Trainer and by the fabric_worker's own loop over volt's launcher (two
// ranks) reach bit-identical parameters after every optimizer step, for ddp with accumulation
// (also with a short last window that the loader's last batch closes) and for ddp_sharded (OSS:
// the optimizer the loop steps is the strategy's wrapper); a ddp_sharded run stopped, saved and
// resumed through Fabric::save/load continues exactly like the run that never stopped; fsdp the
// same, and unwrap_module gives its model back whole; the loop's collectives hold their closed
// forms.
#include <gtest/gtest.h>

#include <regex>

#include "tests/distributed/worker_runs.h"

namespace volt::testing {
namespace {

std::string fabric_command(const std::string& root, const std::string& flags) {
  return built_binary("tests/fabric_worker") + " --seed 3 --timeout 60 --default-root-dir " + root + " " + flags;
}

ProcessResult run_ok(const std::string& command, const std::string& what) {
  auto result = run_command(command, 180);
  EXPECT_EQ(result.exit_code, 0) << what << ":\n" << result.output;
  return result;
}

// Every step of every rank, the Trainer's and the Fabric's, under the same `flags`; after the
// loop, unwrap_module leaves the model whole with the last step's parameters.
void expect_fabric_equals_trainer(const std::string& flags, size_t steps_per_rank, size_t ranks = 2) {
  TemporaryDirectory trainer_dir, fabric_dir;
  const auto trainer = step_lines(
      run_ok(train_command(trainer_dir.path(), flags + " --print-steps"), "Trainer " + flags).output);
  ASSERT_EQ(trainer.size(), ranks) << "every rank of the Trainer prints its steps";
  ASSERT_EQ(trainer.at(0).size(), steps_per_rank) << flags;
  const auto output =
      run_ok(fabric_command(fabric_dir.path(), "--mode train --max-epochs 2 " + flags), "Fabric " + flags).output;
  const auto fabric = step_lines(output);
  // Tolerance 0: bit for bit (the workers print 17 significant digits of float32 values).
  expect_steps_close(fabric, trainer, 0.0, "Fabric vs Trainer, " + flags);
  static const std::regex unwrapped_line("UNWRAPPED rank=(\\d+) params=(\\S+)");
  size_t unwrapped = 0;
  for (std::sregex_iterator it(output.begin(), output.end(), unwrapped_line), end; it != end; ++it, ++unwrapped) {
    const auto rank = std::stoll((*it)[1]);
    ASSERT_TRUE(fabric.count(rank) && !fabric.at(rank).empty()) << flags;
    EXPECT_EQ(comma_separated((*it)[2]), fabric.at(rank).rbegin()->second)
        << flags << ": rank " << rank << "'s model after unwrap_module against its last step";
  }
  EXPECT_EQ(unwrapped, ranks) << flags << ": every rank unwraps its model";
}

TEST(FabricParity, DDPWithAccumulationEqualsTheTrainerAfterEveryStep) {
  // 32 samples a rank in batches of 4: 8 micro-batches, windows of 2, 4 steps an epoch.
  expect_fabric_equals_trainer("--strategy ddp --devices 2 --batch-size 4 --accumulate-grad-batches 2 --optimizer momentum", 8);
}

TEST(FabricParity, DDPLastWindowClosedByTheLoadersLastBatchEqualsTheTrainer) {
  // 32 samples a rank in batches of 3: 11 micro-batches, windows 4, 4, 3 (the loader's last batch
  // closes the third): 3 steps an epoch.
  expect_fabric_equals_trainer("--strategy ddp --devices 2 --batch-size 3 --accumulate-grad-batches 4 --optimizer momentum", 6);
}

// Issue 34.5: windows of 2 whose closing micro-batch runs no backward: the Fabric synchronizes
// what the first one accumulated under no_sync before the step, as the Trainer does (Note [A window
// that closes without backward]); without it each rank stepped on its own gradients.
TEST(FabricParity, DDPWindowsThatCloseWithoutBackwardEqualTheTrainer) {
  expect_fabric_equals_trainer(
      "--strategy ddp --devices 2 --batch-size 4 --accumulate-grad-batches 2 --skip-every 2 --optimizer momentum", 8);
}

TEST(FabricParity, DDPUnderBF16MixedWithTheLossInAutocastEqualsTheTrainer) {
  // The Trainer runs the whole training_step (forward and loss) in the precision's autocast; the
  // loop does the same with fabric.autocast() around its loss.
  TemporaryDirectory trainer_dir, fabric_dir;
  const std::string flags = "--strategy ddp --devices 2 --batch-size 4 --accumulate-grad-batches 2 --precision bf16-mixed";
  const auto trainer = step_lines(run_ok(train_command(trainer_dir.path(), flags + " --print-steps"), flags).output);
  ASSERT_EQ(trainer.size(), 2u);
  const auto fabric = step_lines(
      run_ok(fabric_command(fabric_dir.path(), "--mode train --max-epochs 2 --loss-in-autocast " + flags), flags).output);
  expect_steps_close(fabric, trainer, 0.0, "Fabric vs Trainer, " + flags);
}

TEST(FabricParity, FSDPEqualsTheTrainerAfterEveryStepAndUnwrapsTheWholeModel) {
  // The root unit: gathered in the FabricModule's forward, reduce-scattered in fabric.backward,
  // the shards stepped; no_sync windows of 2; unwrap_module gathers the model back.
  expect_fabric_equals_trainer("--strategy fsdp --devices 2 --batch-size 4 --accumulate-grad-batches 2 --optimizer adam", 8);
}

TEST(FabricParity, DDPShardedEqualsTheTrainerAfterEveryStep) {
  // Adam: per-parameter state, kept by the rank that owns the parameter (OSS).
  expect_fabric_equals_trainer("--strategy ddp_sharded --devices 2 --batch-size 4 --accumulate-grad-batches 2 --optimizer adam", 8);
}

// Every registered strategy's kind, through the same own loop, with what each does in its step
// (after_optimizer_steps: post-local-SGD's and SlowMo's averaging from step 2 on; OSS's
// broadcast; bucket views zeroed in place).
class FabricParityPerStrategy : public ::testing::TestWithParam<std::pair<std::string, int>> {};

TEST_P(FabricParityPerStrategy, EqualsTheTrainerAfterEveryStep) {
  const auto& [strategy, devices] = GetParam();
  // 64 samples in batches of 8 / devices a rank: 8 micro-batches, windows of 2, 4 steps an epoch.
  expect_fabric_equals_trainer("--strategy " + strategy + " --devices " + std::to_string(devices) + " --batch-size " +
                                   std::to_string(8 / devices) + " --accumulate-grad-batches 2 --optimizer momentum",
                               8, static_cast<size_t>(devices));
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, FabricParityPerStrategy,
    ::testing::Values(std::pair<std::string, int>{"single_device", 1}, std::pair<std::string, int>{"ddp:static_graph=true", 2},
                      std::pair<std::string, int>{"ddp:gradient_as_bucket_view=true", 2},
                      std::pair<std::string, int>{"ddp_find_unused_parameters_true", 2},
                      std::pair<std::string, int>{"ddp:shard_optimizer=true", 2},
                      std::pair<std::string, int>{
                          "ddp:comm_hook=post_local_sgd,start_local_sgd_iter=2,subgroup_size=1,model_averaging_period=2", 2},
                      std::pair<std::string, int>{"slowmo:slowmo_frequency=2,localsgd_frequency=2,nprocs_per_node=1", 2}));

TEST(FabricParity, DDPShardedSaveAndLoadResumesExactly) {
  for (const std::string strategy : {"ddp_sharded", "ddp_sharded:state_dict_type=sharded"}) {
    TemporaryDirectory straight_dir, first_dir, second_dir;
    const std::string flags = " --strategy " + strategy + " --devices 2 --batch-size 4 --accumulate-grad-batches 2 --optimizer adam";
    const auto straight = step_lines(
        run_ok(fabric_command(straight_dir.path(), "--mode train --max-epochs 2" + flags), strategy).output);
    const std::string checkpoint = first_dir.file("run.ckpt");
    run_ok(fabric_command(first_dir.path(), "--mode train --max-epochs 1 --save " + checkpoint + flags), strategy);
    const auto resumed_run =
        run_ok(fabric_command(second_dir.path(), "--mode train --max-epochs 1 --load " + checkpoint + flags), strategy);
    const auto resumed = step_lines(resumed_run.output);
    ASSERT_EQ(resumed.size(), 2u) << resumed_run.output;
    for (int64_t rank = 0; rank < 2; ++rank) {
      ASSERT_EQ(resumed.at(rank).size(), 4u) << strategy << ": global_step restored, 4 more steps";
      for (const auto& [step, params] : resumed.at(rank)) {
        ASSERT_TRUE(straight.at(rank).count(step)) << strategy << ": step " << step;
        EXPECT_EQ(params, straight.at(rank).at(step)) << strategy << ": rank " << rank << ", step " << step
                                                      << " after resuming differs from the run that never stopped";
      }
    }
  }
}

TEST(FabricParity, CollectivesHoldTheirClosedFormsOnTwoProcesses) {
  TemporaryDirectory dir;
  const auto run = run_ok(fabric_command(dir.path(), "--mode collectives --strategy ddp --devices 2"), "collectives");
  EXPECT_NE(run.output.find("COLLECTIVES rank=0 ok"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("COLLECTIVES rank=1 ok"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("PRINTED by rank 0 of 2"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("PRINTED by rank 1"), std::string::npos) << "print writes on global rank 0 only";
}

}  // namespace
}  // namespace volt::testing
