// configure_optimizers accepts the forms a LibTorch/Lightning user writes first (Note
// [configure_optimizers forms]): each is written below as a `return` statement, exactly as in a
// Module, and the test checks which optimizers and schedulers the Trainer ends up holding and
// that they act (the learning rates move as the schedulers say).
#include <gtest/gtest.h>

#include <functional>
#include <type_traits>

#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

using torch::optim::Adam;
using torch::optim::SGD;

// The conversions that must stay implicit, and the ones that must not exist.
static_assert(std::is_convertible_v<std::shared_ptr<SGD>, OptimizerConfig>);
static_assert(std::is_convertible_v<std::shared_ptr<torch::optim::Optimizer>, OptimizerConfig>);
static_assert(std::is_convertible_v<std::shared_ptr<StepLR>, SchedulerConfig>);
static_assert(!std::is_convertible_v<std::shared_ptr<StepLR>, OptimizerConfig>);
static_assert(!std::is_convertible_v<std::shared_ptr<SGD>, SchedulerConfig>);

// The regression module with configure_optimizers supplied by each test.
class ConfiguredModule : public RegressionModule {
 public:
  explicit ConfiguredModule(std::function<OptimizerConfig(ConfiguredModule&)> configure)
      : configure_(std::move(configure)) {}
  OptimizerConfig configure_optimizers() override { return configure_(*this); }
  std::shared_ptr<SGD> weight_sgd(double lr) {
    return std::make_shared<SGD>(std::vector<torch::Tensor>{linear->weight}, lr);
  }
  std::shared_ptr<Adam> bias_adam(double lr) {
    return std::make_shared<Adam>(std::vector<torch::Tensor>{linear->bias}, torch::optim::AdamOptions(lr));
  }

 private:
  std::function<OptimizerConfig(ConfiguredModule&)> configure_;
};

// One epoch of 4 optimizer steps; returns the Trainer's view after the fit.
struct Received {
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers;  // kept alive past the Trainer
  std::vector<SchedulerConfig> schedulers;
  std::vector<double> final_lrs;  // the first param group's lr of each optimizer after the fit
};

Received fit(std::function<OptimizerConfig(ConfiguredModule&)> configure) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  auto model = std::make_shared<ConfiguredModule>(std::move(configure));
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<RegressionData>(32, 8));
  Received received;
  for (const auto& optimizer : trainer.optimizers()) {
    received.optimizers.push_back(optimizer);
    received.final_lrs.push_back(optimizer->param_groups()[0].options().get_lr());
  }
  received.schedulers = trainer.lr_schedulers();
  return received;
}

TEST(ConfigureOptimizers, MakeSharedOfAConcreteOptimizerConvertsDirectly) {
  SGD* built = nullptr;
  const auto received = fit([&](ConfiguredModule& m) -> OptimizerConfig {
    auto optimizer = std::make_shared<SGD>(m.parameters(), torch::optim::SGDOptions(0.1));
    built = optimizer.get();
    return optimizer;
  });
  ASSERT_EQ(received.optimizers.size(), 1u);
  EXPECT_EQ(received.optimizers[0].get(), built);
  EXPECT_TRUE(received.schedulers.empty());
  EXPECT_DOUBLE_EQ(received.final_lrs[0], 0.1);
}

TEST(ConfigureOptimizers, TheMakeSharedExpressionItselfConverts) {
  const auto received = fit([](ConfiguredModule& m) -> OptimizerConfig {
    return std::make_shared<Adam>(m.parameters(), torch::optim::AdamOptions(0.01));
  });
  ASSERT_EQ(received.optimizers.size(), 1u);
  EXPECT_NE(dynamic_cast<Adam*>(received.optimizers[0].get()), nullptr);
}

TEST(ConfigureOptimizers, OptimizerAndSchedulerPairDefaultsToPerEpoch) {
  StepLR* built = nullptr;
  const auto received = fit([&](ConfiguredModule& m) -> OptimizerConfig {
    auto optimizer = std::make_shared<SGD>(m.parameters(), 0.1);
    auto scheduler = std::make_shared<StepLR>(*optimizer, 1, 0.5);
    built = scheduler.get();
    return {optimizer, scheduler};
  });
  ASSERT_EQ(received.optimizers.size(), 1u);
  ASSERT_EQ(received.schedulers.size(), 1u);
  EXPECT_EQ(received.schedulers[0].scheduler.get(), built);
  EXPECT_EQ(received.schedulers[0].interval, SchedulerInterval::Epoch);
  EXPECT_EQ(&received.schedulers[0].scheduler->optimizer(), received.optimizers[0].get());
  EXPECT_DOUBLE_EQ(received.final_lrs[0], 0.05);  // one epoch: halved once
}

TEST(ConfigureOptimizers, OptimizerWithABracedSchedulerConfig) {
  const auto received = fit([](ConfiguredModule& m) -> OptimizerConfig {
    auto optimizer = std::make_shared<SGD>(m.parameters(), 0.1);
    return {optimizer, {std::make_shared<StepLR>(*optimizer, 1, 0.5), SchedulerInterval::Step, 2, "my_lr"}};
  });
  ASSERT_EQ(received.schedulers.size(), 1u);
  EXPECT_EQ(received.schedulers[0].interval, SchedulerInterval::Step);
  EXPECT_EQ(received.schedulers[0].frequency, 2);
  EXPECT_EQ(received.schedulers[0].name, "my_lr");
  EXPECT_DOUBLE_EQ(received.final_lrs[0], 0.1 * 0.25);  // 4 steps, every 2nd advances the schedule
}

TEST(ConfigureOptimizers, AListOfOptimizers) {
  const auto received = fit([](ConfiguredModule& m) -> OptimizerConfig {
    return {m.weight_sgd(0.1), m.bias_adam(0.01)};
  });
  ASSERT_EQ(received.optimizers.size(), 2u);
  EXPECT_NE(dynamic_cast<SGD*>(received.optimizers[0].get()), nullptr);
  EXPECT_NE(dynamic_cast<Adam*>(received.optimizers[1].get()), nullptr);
  EXPECT_TRUE(received.schedulers.empty());
}

TEST(ConfigureOptimizers, AListOfPairsAndBareOptimizersKeepsTheirOrder) {
  const auto received = fit([](ConfiguredModule& m) -> OptimizerConfig {
    auto sgd = m.weight_sgd(0.1);
    auto adam = m.bias_adam(0.01);
    return {{sgd, std::make_shared<ExponentialLR>(*sgd, 0.5)}, adam};
  });
  ASSERT_EQ(received.optimizers.size(), 2u);
  EXPECT_NE(dynamic_cast<SGD*>(received.optimizers[0].get()), nullptr);
  EXPECT_NE(dynamic_cast<Adam*>(received.optimizers[1].get()), nullptr);
  ASSERT_EQ(received.schedulers.size(), 1u);
  EXPECT_EQ(&received.schedulers[0].scheduler->optimizer(), received.optimizers[0].get());
  EXPECT_DOUBLE_EQ(received.final_lrs[0], 0.05);
  EXPECT_DOUBLE_EQ(received.final_lrs[1], 0.01);
}

TEST(ConfigureOptimizers, LightningsTwoLists) {
  const auto received = fit([](ConfiguredModule& m) -> OptimizerConfig {
    auto sgd = m.weight_sgd(0.1);
    auto adam = m.bias_adam(0.01);
    return {{sgd, adam}, {std::make_shared<StepLR>(*sgd, 1, 0.5), std::make_shared<StepLR>(*adam, 1, 0.1)}};
  });
  ASSERT_EQ(received.optimizers.size(), 2u);
  ASSERT_EQ(received.schedulers.size(), 2u);
  EXPECT_EQ(&received.schedulers[0].scheduler->optimizer(), received.optimizers[0].get());
  EXPECT_EQ(&received.schedulers[1].scheduler->optimizer(), received.optimizers[1].get());
  EXPECT_DOUBLE_EQ(received.final_lrs[0], 0.05);
  EXPECT_DOUBLE_EQ(received.final_lrs[1], 0.001);
}

TEST(ConfigureOptimizers, AListBuiltAtRunTime) {
  const auto received = fit([](ConfiguredModule& m) -> OptimizerConfig {
    std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers{m.weight_sgd(0.1), m.bias_adam(0.01)};
    return optimizers;
  });
  EXPECT_EQ(received.optimizers.size(), 2u);
}

TEST(ConfigureOptimizers, ASchedulerOfAnOptimizerNotReturnedIsStillAnError) {
  const auto message = configuration_error_of([] {
    fit([](ConfiguredModule& m) -> OptimizerConfig {
      auto returned = m.weight_sgd(0.1);
      auto other = std::make_shared<SGD>(std::vector<torch::Tensor>{m.linear->bias}, 0.1);
      return {returned, std::make_shared<StepLR>(*other, 1, 0.5)};
    });
  });
  EXPECT_NE(message.find("not among the returned optimizers"), std::string::npos) << message;
}

}  // namespace
}  // namespace volt::testing
