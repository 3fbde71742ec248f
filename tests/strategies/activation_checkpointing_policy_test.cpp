// Activation checkpointing by policy (`<strategy>:activation_checkpointing=<types>`, applied by
// Strategy::setup_module before the strategy wraps the model) and FSDP's units by type
// (`fsdp:wrap=<types>`), end to end through volt's launcher (the distributed_worker program, its
// `--model blocks`: two RegressionBlocks in a ModuleList, each called as volt::call(block, x,
// mask), with dropout inside). Checkpointing changes no bit of training under any strategy (the
// recompute draws the same dropout masks and sums the same gradients in the same order); units
// around the blocks train like ddp within 1e-6 (ring reduce-scatter vs ring all-reduce orders),
// with and without checkpointing inside them, and likewise blocks the model marked with
// volt::fsdp::shard (which ddp ignores); a Sequential's entries are reached too; bad input stops
// the run naming what to do.
#include <gtest/gtest.h>

#include "strategies/ddp/ddp_strategy.h"
#include "strategies/single_device_strategy.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/regression_problem.h"

namespace volt::testing {
namespace {

std::string with_option(const std::string& strategy, const std::string& option) {
  return strategy + (strategy.find(':') == std::string::npos ? ":" : ",") + option;
}

StepParameters blocks_steps(const std::string& strategy, int64_t ranks, const std::string& model = "blocks") {
  auto steps = step_lines(run_print_steps(strategy, ranks, "adam", "--model " + model));
  EXPECT_FALSE(steps.empty()) << strategy;
  return steps;
}

TEST(ActivationCheckpointingPolicy, EveryStrategyTrainsBitwiseAsWithoutItWithDropoutInTheBlocks) {
  const std::vector<std::pair<std::string, int64_t>> strategies = {
      {"single_device", 1}, {"ddp", 2}, {"ddp_sharded", 2}, {"fsdp:wrap=RegressionBlock", 2}};
  for (const auto& [strategy, ranks] : strategies) {
    const auto plain = blocks_steps(strategy, ranks);
    const auto checkpointed = with_option(strategy, "activation_checkpointing=RegressionBlock");
    expect_steps_close(blocks_steps(checkpointed, ranks), plain, 0.0, checkpointed + " vs " + strategy);
  }
}

struct TrainedBlocks {
  torch::Tensor parameters;
  std::vector<int64_t> forwards;  // each block's, recomputes included
};

// One epoch (6 batches) of the blocks model in this process under `strategy`. Once fit returned,
// with the Trainer still alive, nothing is left wrapped around the blocks.
TrainedBlocks trained_blocks(std::shared_ptr<Strategy> strategy) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.seed = 5;
  options.max_epochs = 1;
  torch::manual_seed(5);
  auto model = std::make_shared<RegressionModule>(RegressionOptions{.adam = true, .blocks = 2, .block_dropout = 0.3});
  Trainer trainer(options, std::move(strategy));
  trainer.fit(model, std::make_shared<RegressionData>(48, 8));
  TrainedBlocks out{model->flat_parameters(), {}};
  for (const auto& block : *model->blocks) {
    EXPECT_FALSE(has_forward_wrappers(*block)) << "the policy is removed when the run ends";
    out.forwards.push_back(block->as<RegressionBlock>()->forwards);
  }
  return out;
}

TEST(ActivationCheckpointingPolicy, AProgramMayChooseTheModulesByPredicate) {
  const auto plain = trained_blocks(std::make_shared<SingleDeviceStrategy>());
  auto strategy = std::make_shared<SingleDeviceStrategy>();
  strategy->set_activation_checkpointing(ModuleSelector::by_predicate(
      [](const std::string& path, const torch::nn::Module&) { return path == "blocks.1"; }, "the second block"));
  const auto checkpointed = trained_blocks(strategy);
  EXPECT_TRUE(torch::equal(checkpointed.parameters, plain.parameters));
  EXPECT_EQ(checkpointed.forwards[0], plain.forwards[0]) << "the first block is not selected";
  EXPECT_EQ(checkpointed.forwards[1] - plain.forwards[1], 6) << "one recompute per training step";
}

TEST(ActivationCheckpointingPolicy, ReachesASequentialsEntriesWithoutVoltCall) {
  // --model mlp: Sequential(Linear, Tanh, Linear, Tanh) called as body->forward(x).
  const auto plain = blocks_steps("ddp", 2, "mlp");
  expect_steps_close(blocks_steps("ddp:activation_checkpointing=Linear|Tanh", 2, "mlp"), plain, 0.0,
                     "ddp:activation_checkpointing=Linear|Tanh vs ddp, mlp");
}

TEST(FSDPWrapByType, UnitsAroundBlocksCalledThroughVoltCallTrainLikeDDP) {
  const auto ddp = blocks_steps("ddp", 2);
  for (const std::string fsdp :
       {"fsdp:wrap=RegressionBlock", "fsdp:wrap=RegressionBlock,sharding_strategy=SHARD_GRAD_OP",
        "fsdp:wrap=RegressionBlock,forward_prefetch=true,backward_prefetch=true",
        "fsdp:wrap=RegressionBlock,activation_checkpointing=RegressionBlock"}) {
    expect_steps_close(blocks_steps(fsdp, 2), ddp, 1e-6, fsdp + " vs ddp");
  }
  // Marked by volt::fsdp::shard where the model builds them: units under fsdp, nothing under ddp.
  expect_steps_close(blocks_steps("fsdp", 2, "blocks_sharded"), ddp, 1e-6, "fsdp, blocks marked by shard(), vs ddp");
  expect_steps_close(blocks_steps("ddp", 2, "blocks_sharded"), ddp, 0.0, "ddp ignores the marks");
}

TEST(FSDPWrapByType, EachSelectedOrMarkedModuleIsAUnitOfItsOwn) {
  for (const std::string flags : {"--strategy fsdp:wrap=RegressionBlock --model blocks",
                                  "--strategy fsdp --model blocks_sharded",
                                  "--strategy fsdp:wrap=RegressionBlock --model blocks_sharded"}) {
    TemporaryDirectory dir;
    const auto result = run_command(train_command(dir.path(), flags + " --devices 2 --optimizer adam"), 240);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    double units = 0;
    for (const auto& row : read_csv(dir.path() + "/volt_logs/version_0/metrics.csv")) {
      if (row.count("fsdp/units") && !row.at("fsdp/units").empty()) units = std::stod(row.at("fsdp/units"));
    }
    EXPECT_EQ(units, 3) << flags << ": the root and one unit per RegressionBlock, each once";
  }
}

std::string failure_of(const std::string& strategy, const std::string& model, int64_t ranks = 2) {
  TemporaryDirectory dir;
  const auto result =
      run_command(train_command(dir.path(), "--strategy \"" + strategy + "\" --devices " + std::to_string(ranks) +
                                                " --optimizer adam --model " + model),
                  240);
  EXPECT_NE(result.exit_code, 0) << strategy << ":\n" << result.output;
  return result.output;
}

TEST(Policies, BadInputStopsTheRunSayingWhatToDo) {
  const auto nothing = failure_of("fsdp:wrap=Blok", "blocks");
  EXPECT_NE(nothing.find("fsdp:wrap=Blok selects the modules of type Blok, and the model has none"),
            std::string::npos)
      << nothing;
  EXPECT_NE(nothing.find("volt::testing::RegressionBlock"), std::string::npos) << "lists the model's types\n"
                                                                             << nothing;


  // The model calls its linear layer as linear->forward(x): nothing can intercept that call.
  const auto unreached = failure_of("single_device:activation_checkpointing=Linear", "linear", 1);
  EXPECT_NE(unreached.find("none of them ran through volt::call with gradients on during the first training step"),
            std::string::npos)
      << unreached;
  EXPECT_NE(unreached.find("'linear', a torch::nn::Linear"), std::string::npos) << unreached;

  // A unit inside a checkpointed module would gather again during its own backward.
  const auto nested = failure_of("fsdp:wrap=Linear,activation_checkpointing=RegressionBlock", "blocks");
  EXPECT_NE(nested.find("the unit 'blocks.0.linear' lies inside 'blocks.0', whose forward is checkpointed"),
            std::string::npos)
      << nested;

  // The same for a unit by type: its parameters stay released, and the step's error names why.
  const auto released = failure_of("fsdp:wrap=RegressionBlock|Linear", "blocks");
  EXPECT_NE(released.find("'linear' (a unit by --strategy fsdp:wrap=RegressionBlock|Linear) has not run through "
                          "its unit once"),
            std::string::npos)
      << released;
  EXPECT_NE(released.find("Call it as volt::call(linear, args...)"), std::string::npos) << released;

}

// Checked when the Trainer is constructed, before any process starts.
TEST(Policies, BadSettingsFailAtConstruction) {
  EXPECT_NE(trainer_construction_error("fsdp:wrap=RegressionBlock,min_num_params=10", 2)
                .find("wrap=RegressionBlock and min_num_params both choose the units; give one of the two"),
            std::string::npos);
  EXPECT_NE(trainer_construction_error("ddp:activation_checkpointing=Block||MLP", 2)
                .find("module type names joined by '|' (Block|MLP)"),
            std::string::npos);
  EXPECT_NE(trainer_construction_error("fsdp:wrap=|Block", 2).find("module type names joined by '|'"),
            std::string::npos);
}

// A captured step replays device work only: the recompute's host-side generator states would not
// be set again, so a policy is refused by single_device, the one strategy a graph can hold (ddp is
// refused whatever its options).
TEST(Policies, ACapturedStepRefusesActivationCheckpointing) {
  EXPECT_NO_THROW(SingleDeviceStrategy().check_capturable());
  const auto single = error_message_of<NotSupportedError>([] {
    SingleDeviceStrategy(SingleDeviceOptions{"RegressionBlock"}).check_capturable();
  });
  EXPECT_NE(single.find("--strategy single_device:activation_checkpointing recomputes forwards in the backward"),
            std::string::npos)
      << single;
  DDPOptions ddp_options;
  ddp_options.activation_checkpointing = "RegressionBlock";
  const auto ddp = error_message_of<NotSupportedError>([&] { DDPStrategy(ddp_options).check_capturable(); });
  EXPECT_NE(ddp.find("strategy 'ddp' is not captured"), std::string::npos) << ddp;
}

}  // namespace
}  // namespace volt::testing
