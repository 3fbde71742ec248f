// LearningRateMonitor: learning rates (and momentum, weight decay) reach the loggers at the
// interval asked for, under Lightning's names.
#include <gtest/gtest.h>

#include "tests/support/recording_logger.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// Two optimizers (SGD with momentum on the weight, Adam on the bias), or one SGD with two groups.
class TwoOptimizerModule : public RegressionModule {
 public:
  explicit TwoOptimizerModule(bool param_groups, std::string scheduler_name = "")
      : param_groups_(param_groups), scheduler_name_(std::move(scheduler_name)) {}
  OptimizerConfig configure_optimizers() override {
    if (param_groups_) {
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(std::vector<torch::Tensor>{linear->weight},
                          std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.1)));
      groups.emplace_back(std::vector<torch::Tensor>{linear->bias},
                          std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.01)));
      return std::shared_ptr<torch::optim::Optimizer>(
          std::make_shared<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.1)));
    }
    auto sgd = std::make_shared<torch::optim::SGD>(std::vector<torch::Tensor>{linear->weight},
                                                   torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
    auto adam = std::make_shared<torch::optim::Adam>(std::vector<torch::Tensor>{linear->bias},
                                                     torch::optim::AdamOptions(0.001).betas({0.8, 0.99}));
    OptimizerConfig config;
    config.optimizers = {sgd, adam};
    config.schedulers.push_back({std::make_shared<StepLR>(*sgd, 1, 0.5), SchedulerInterval::Step, 1, scheduler_name_});
    config.schedulers.push_back({std::make_shared<StepLR>(*adam, 1, 0.1), SchedulerInterval::Epoch, 1, ""});
    return config;
  }

 private:
  bool param_groups_;
  std::string scheduler_name_;
};

std::shared_ptr<RecordingLogger> fit_with(std::shared_ptr<LearningRateMonitor> monitor, std::shared_ptr<Module> model,
                                          int64_t log_every_n_steps = 1) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 2;
  options.log_every_n_steps = log_every_n_steps;
  auto logger = std::make_shared<RecordingLogger>();
  Trainer trainer(options);
  trainer.add_logger(logger);
  trainer.add_callback(monitor);
  trainer.fit(model, std::make_shared<RegressionData>(32, 8));  // 4 steps per epoch
  return logger;
}

using Series = std::vector<std::pair<int64_t, double>>;

TEST(LearningRateMonitor, EachSchedulerAtItsOwnIntervalByDefault) {
  auto logger = fit_with(std::make_shared<LearningRateMonitor>(), std::make_shared<TwoOptimizerModule>(false));
  // SGD's step scheduler halves the rate every step: logged before each step with the steps taken.
  Series sgd;
  for (int64_t s = 0; s < 8; ++s) sgd.emplace_back(s, 0.1 * std::pow(0.5, s));
  const auto logged = logger->series("lr-SGD");
  ASSERT_EQ(logged.size(), sgd.size());
  for (size_t i = 0; i < sgd.size(); ++i) {
    EXPECT_EQ(logged[i].first, sgd[i].first);
    EXPECT_DOUBLE_EQ(logged[i].second, sgd[i].second);
  }
  // Adam's epoch scheduler: at each epoch start.
  const auto adam = logger->series("lr-Adam");
  ASSERT_EQ(adam.size(), 2u);
  EXPECT_EQ(adam[0].first, 0);
  EXPECT_DOUBLE_EQ(adam[0].second, 0.001);
  EXPECT_EQ(adam[1].first, 4);
  EXPECT_DOUBLE_EQ(adam[1].second, 0.0001);
  EXPECT_TRUE(logger->series("lr-SGD-momentum").empty()) << "momentum only when asked";
}

TEST(LearningRateMonitor, StepIntervalFollowsLogEveryNStepsAndLogsMomentumAndWeightDecay) {
  auto logger = fit_with(std::make_shared<LearningRateMonitor>(LoggingInterval::Step, true, true),
                         std::make_shared<TwoOptimizerModule>(false, "sgd_lr"), /*log_every_n_steps=*/2);
  const auto sgd = logger->series("sgd_lr");
  ASSERT_EQ(sgd.size(), 4u) << "the scheduler's name is the key";
  EXPECT_EQ(sgd[1].first, 2);
  EXPECT_DOUBLE_EQ(sgd[1].second, 0.1 * 0.25);
  EXPECT_EQ(logger->series("lr-Adam").size(), 4u) << "step interval applies to every optimizer";
  EXPECT_DOUBLE_EQ(logger->series("sgd_lr-momentum").front().second, 0.9);
  EXPECT_DOUBLE_EQ(logger->series("sgd_lr-weight_decay").front().second, 1e-4);
  EXPECT_DOUBLE_EQ(logger->series("lr-Adam-momentum").front().second, 0.8) << "Adam's beta1";
  for (const auto& [step, metrics] : logger->rows) EXPECT_TRUE(metrics.count("epoch"));
}

TEST(LearningRateMonitor, EpochIntervalAndParamGroups) {
  auto logger = fit_with(std::make_shared<LearningRateMonitor>(LoggingInterval::Epoch),
                         std::make_shared<TwoOptimizerModule>(true));
  EXPECT_EQ(logger->series("lr-SGD/pg1"), (Series{{0, 0.1}, {4, 0.1}}));
  EXPECT_EQ(logger->series("lr-SGD/pg2"), (Series{{0, 0.01}, {4, 0.01}}));
}

TEST(LearningRateMonitor, NeedsALogger) {
  TemporaryDirectory dir;
  Trainer trainer(quiet_options(dir.path()));
  trainer.add_callback(std::make_shared<LearningRateMonitor>());
  EXPECT_THROW(trainer.fit(std::make_shared<RegressionModule>(), std::make_shared<RegressionData>(16, 8)),
               ConfigurationError);
  EXPECT_THROW(callback_registry().create("learning_rate_monitor:logging_interval=hourly"), ConfigurationError);
}

}  // namespace
}  // namespace volt::testing
