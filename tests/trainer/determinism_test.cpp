// deterministic + seed: two runs give bitwise-identical weights on CPU, with shuffling and
// dropout drawing random numbers throughout.
#include <gtest/gtest.h>

#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

torch::Tensor train(uint64_t seed) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 3;
  options.deterministic = true;
  options.seed = seed;
  options.accumulate_grad_batches = 2;
  // The module is built after the seed is set (like Lightning's seed_everything), so its
  // initial weights are part of what the seed decides.
  torch::manual_seed(seed);
  auto model = std::make_shared<RegressionModule>(RegressionOptions{.adam = true, .dropout = 0.3});
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<RegressionData>(96, 8, /*shuffle=*/true, seed));
  return model->flat_parameters();
}

TEST(Determinism, TheSameSeedGivesBitwiseIdenticalWeights) {
  const auto first = train(7);
  const auto second = train(7);
  EXPECT_TRUE(torch::equal(first, second)) << "max difference " << (first - second).abs().max().item<double>();
}

TEST(Determinism, ADifferentSeedGivesDifferentWeights) {
  EXPECT_FALSE(torch::equal(train(7), train(8)));
}

TEST(Determinism, AModuleBuiltAfterTheTrainerStartsFromTheSeedsWeights) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.seed = 11;
  torch::manual_seed(999);  // whatever state the program was in before
  Trainer trainer(options);
  torch::nn::Linear built_after_the_trainer(8, 4);
  torch::manual_seed(11);
  torch::nn::Linear built_after_seeding(8, 4);
  EXPECT_TRUE(torch::equal(built_after_the_trainer->weight, built_after_seeding->weight));
}

}  // namespace
}  // namespace volt::testing
