// Module::configure_model (Lightning's hook): the Trainer calls it at the start of every fit,
// validate, test and predict, after the callbacks' setup and before the strategy sets the module
// up, so the layers it builds are converted, moved and wrapped like the constructor's: an
// activation checkpointing policy finds them (it would stop the run, finding no module of the
// type, if the hook ran after the setup), and they train.
#include <gtest/gtest.h>

#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// The regression model whose blocks are built in configure_model instead of the constructor.
class LateBlocks : public RegressionModule {
 public:
  LateBlocks() : RegressionModule(RegressionOptions{.adam = true}) {}

  void configure_model() override {
    calls.push_back(blocks ? "found" : "built");
    if (blocks) return;  // built at the first call: validate, test and predict find them
    options.blocks = 2;
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < options.blocks; ++i) blocks->push_back(RegressionBlock(options.features, 0.3));
    built_weight = blocks[0]->as<RegressionBlock>()->linear->weight.detach().clone();
  }

  std::vector<std::string> calls;
  torch::Tensor built_weight;  // the first block's weight as the hook built it
};

// Fits one epoch then validates, under `strategy`, from seed 5; the parameters after the fit.
torch::Tensor fit_and_validate(const std::shared_ptr<LateBlocks>& model, const std::string& strategy) {
  TemporaryDirectory dir;
  Trainer trainer(options_from_args({"--max-epochs", "1", "--enable-progress-bar", "false", "--enable-checkpointing",
                                     "false", "--enable-model-summary", "false", "--logger", "none", "--seed", "5",
                                     "--strategy", strategy, "--default-root-dir", dir.path()}));
  const auto data = std::make_shared<RegressionData>(48, 8, false, 0, 16);
  trainer.fit(model, data);
  const auto trained = model->flat_parameters();
  trainer.validate(model, data);
  return trained;
}

TEST(ConfigureModel, ItBuildsBeforeTheStrategySetsUpAndItsLayersTrain) {
  torch::manual_seed(5);
  auto plain = std::make_shared<LateBlocks>();
  torch::manual_seed(5);
  auto checkpointed = std::make_shared<LateBlocks>();
  EXPECT_FALSE(plain->blocks);

  const auto expected = fit_and_validate(plain, "single_device");
  EXPECT_EQ(plain->calls, (std::vector<std::string>{"built", "found"})) << "fit, then validate";
  ASSERT_TRUE(plain->blocks);
  EXPECT_EQ(plain->parameters().size(), 6u) << "the constructor's Linear and two blocks' Linears";
  EXPECT_FALSE(torch::equal(plain->blocks[0]->as<RegressionBlock>()->linear->weight, plain->built_weight))
      << "the blocks built in the hook were trained";

  EXPECT_TRUE(torch::equal(fit_and_validate(checkpointed, "single_device:activation_checkpointing=RegressionBlock"),
                           expected));
  EXPECT_EQ(checkpointed->blocks[0]->as<RegressionBlock>()->forwards -
                plain->blocks[0]->as<RegressionBlock>()->forwards,
            6)
      << "the policy found the hook's blocks: one recompute per training step (48 samples, batch 8)";
}

}  // namespace
}  // namespace volt::testing
