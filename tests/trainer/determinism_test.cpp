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
  // The shuffling order is left to the Trainer's seed (issue 21.3: it used to be fixed by the
  // loader whatever --seed said).
  trainer.fit(model, std::make_shared<RegressionData>(96, 8, /*shuffle=*/true, /*seed=*/3, 0, /*seed_loaders=*/false));
  return model->flat_parameters();
}

// The input sums of the first epoch's batches, in order, of a fit run with `flags`.
std::vector<double> batch_order(const std::vector<std::string>& flags, bool seed_loaders) {
  struct Recorder : RegressionModule {
    torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
      sums.push_back(batch.input.sum().item<double>());
      return RegressionModule::training_step(batch, batch_idx);
    }
    std::vector<double> sums;
  };
  TemporaryDirectory dir;
  auto args = flags;
  for (const std::string flag : {"--max-epochs", "1", "--enable-progress-bar", "false", "--enable-checkpointing",
                                 "false", "--enable-model-summary", "false", "--logger", "none",
                                 "--default-root-dir"}) {
    args.push_back(flag);
  }
  args.push_back(dir.path());
  Trainer trainer(options_from_args(args));
  auto model = std::make_shared<Recorder>();
  trainer.fit(model, std::make_shared<RegressionData>(64, 8, /*shuffle=*/true, /*seed=*/3, 0, seed_loaders));
  return model->sums;
}

TEST(Determinism, TheSeedFlagDecidesTheOrderOfLoadersWithoutASeedOfTheirOwn) {
  const auto seven = batch_order({"--seed", "7"}, false);
  EXPECT_EQ(batch_order({"--seed", "7"}, false), seven);
  EXPECT_NE(batch_order({"--seed", "8"}, false), seven) << "--seed did not reach the sampler";
  // A loader with its own seed keeps its order whatever --seed says.
  EXPECT_EQ(batch_order({"--seed", "7"}, true), batch_order({"--seed", "8"}, true));
  // Without --seed, an unseeded loader shuffles as with seed 0 (the order of earlier versions).
  EXPECT_EQ(batch_order({}, false), batch_order({"--seed", "0"}, false));
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
