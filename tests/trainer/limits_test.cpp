// Step and batch limits: max_steps stops exactly, limit_* count fractions and batches the way
// Lightning does, fast_dev_run and overfit_batches run what they promise.
#include <gtest/gtest.h>

#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

struct Run {
  int64_t training_steps = 0;
  int64_t validation_steps = 0;
  int64_t optimizer_steps = 0;
  int64_t global_step = 0;
  int64_t epochs = 0;
};

// 10 training batches of 8 and 5 validation batches per epoch unless the data says otherwise.
Run fit(TrainerOptions options, int64_t train_samples = 80, int64_t val_samples = 40) {
  auto model = std::make_shared<RegressionModule>();
  Trainer trainer(std::move(options));
  trainer.fit(model, std::make_shared<RegressionData>(train_samples, 8, false, 0, val_samples));
  return {model->training_steps, model->validation_steps, model->optimizer_steps, trainer.global_step(),
          trainer.current_epoch()};
}

TEST(Limits, MaxStepsStopsExactlyMidEpoch) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 5;
  options.max_steps = 7;
  const auto run = fit(options);
  EXPECT_EQ(run.global_step, 7);
  EXPECT_EQ(run.optimizer_steps, 7);
  EXPECT_EQ(run.training_steps, 7);
}

TEST(Limits, MaxStepsCountsAccumulationWindows) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_steps = 4;
  options.accumulate_grad_batches = 3;
  options.limit_val_batches = BatchLimit::count(0);
  auto run = fit(options);  // windows of 3, 3, 3 and a partial 1 fill the first epoch
  EXPECT_EQ(run.global_step, 4);
  EXPECT_EQ(run.training_steps, 10);
  options.max_steps = 5;
  run = fit(options);  // and one more window of 3 in the second
  EXPECT_EQ(run.global_step, 5);
  EXPECT_EQ(run.training_steps, 13);
}

TEST(Limits, MaxEpochsRunsWholeEpochs) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 3;
  const auto run = fit(options);
  EXPECT_EQ(run.epochs, 3);
  EXPECT_EQ(run.training_steps, 30);
  EXPECT_EQ(run.validation_steps, 15);
}

TEST(Limits, LimitBatchesAcceptsFractionsAndCounts) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 2;
  options.limit_train_batches = BatchLimit::fraction(0.5);
  options.limit_val_batches = BatchLimit::count(2);
  auto run = fit(options);
  EXPECT_EQ(run.training_steps, 2 * 5);
  EXPECT_EQ(run.validation_steps, 2 * 2);

  options.limit_train_batches = BatchLimit::count(3);
  options.limit_val_batches = BatchLimit::fraction(0.0);
  run = fit(options);
  EXPECT_EQ(run.training_steps, 2 * 3);
  EXPECT_EQ(run.validation_steps, 0);
}

TEST(Limits, ValCheckIntervalAndSanitySteps) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.val_check_interval = BatchLimit::count(5);  // after batches 5 and 10
  options.num_sanity_val_steps = 2;
  const auto run = fit(options);
  EXPECT_EQ(run.validation_steps, 2 + 5 + 5);
}

TEST(Limits, CheckValEveryNEpochs) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 4;
  options.check_val_every_n_epoch = 2;
  const auto run = fit(options);
  EXPECT_EQ(run.validation_steps, 2 * 5);
}

TEST(Limits, FastDevRunRunsNBatchesOfEachLoopOnce) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 10;
  options.fast_dev_run = 2;
  options.num_sanity_val_steps = 2;
  const auto run = fit(options);
  EXPECT_EQ(run.epochs, 1);
  EXPECT_EQ(run.training_steps, 2);
  EXPECT_EQ(run.validation_steps, 2);  // no sanity check under fast_dev_run
}

TEST(Limits, OverfitBatchesTrainsAndValidatesOnTheSameFirstBatches) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 2;
  options.overfit_batches = BatchLimit::count(3);
  const auto run = fit(options);
  EXPECT_EQ(run.training_steps, 2 * 3);
  EXPECT_EQ(run.validation_steps, 2 * 3);
}

TEST(Limits, ValCheckIntervalLargerThanTheEpochIsAConfigurationError) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.val_check_interval = BatchLimit::count(50);
  try {
    fit(options);
    FAIL() << "expected a ConfigurationError";
  } catch (const ConfigurationError& e) {
    EXPECT_NE(std::string(e.what()).find("--val-check-interval"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace volt::testing
