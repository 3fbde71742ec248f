// Issue 34.4: README's GAN pattern (manual optimization, a generator's and a discriminator's Adam,
// toggle_model() around each manual_backward; the worker's --mode gan) trains alike under every
// strategy that runs it, on two processes, after every step: `ddp:find_unused_parameters=true`
// (the toggled-off parameters get no gradient) is the reference. FSDP's flat shards used to leave
// the toggle off the module's parameters, so the discriminator's units collected gradients during
// the generator's backward and stepped with them; ddp_sharded refused the toggle as a parameter
// "converted or moved".
#include <gtest/gtest.h>

#include "tests/distributed/worker_runs.h"

namespace volt::testing {
namespace {

ProcessResult run_gan(const std::string& strategy) {
  TemporaryDirectory dir;
  const auto command = built_binary("tests/distributed_worker") + " --mode gan --seed 3 --max-epochs 2 --timeout 60" +
                       " --enable-progress-bar false --enable-model-summary false --enable-checkpointing false" +
                       " --num-sanity-val-steps 0 --log-every-n-steps 1 --devices 2 --batch-size 8 --default-root-dir " +
                       dir.path() + " --strategy " + strategy;
  return run_command(command, 180);
}

StepParameters gan_steps(const std::string& strategy) {
  const auto result = run_gan(strategy);
  EXPECT_EQ(result.exit_code, 0) << strategy << ":\n" << result.output;
  return step_lines(result.output);
}

TEST(ToggleModel, TheGanPatternTrainsAlikeUnderEveryStrategyAfterEveryStep) {
  const auto reference = gan_steps("ddp:find_unused_parameters=true");
  ASSERT_EQ(reference.size(), 2u);
  ASSERT_EQ(reference.at(0).size(), 8u) << "64 samples, 8 per rank a batch: 4 batches an epoch, 2 epochs";
  for (const std::string strategy :
       {"ddp:find_unused_parameters=true,shard_optimizer=true", "ddp_sharded", "fsdp:min_num_params=10",
        "fsdp:min_num_params=10,sharding_strategy=SHARD_GRAD_OP"}) {
    expect_steps_close(gan_steps(strategy), reference, 1e-6, strategy + " vs ddp:find_unused_parameters=true");
  }
}

TEST(ToggleModel, PlainDDPStopsAtTheFirstBackwardNamingTheToggledParameters) {
  // As PyTorch's DDP: parameters that get no gradient need find_unused_parameters.
  const auto result = run_gan("ddp");
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("disc.0.weight"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("find_unused_parameters"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace volt::testing
