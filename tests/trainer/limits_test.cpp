// Step and batch limits: max_steps stops exactly, limit_* count fractions and batches the way
// Lightning does, fast_dev_run and overfit_batches run what they promise (and fast_dev_run writes
// nothing).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

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

// Issue 21.6: --limit-predict-batches through the command line and Trainer::predict.
TEST(Limits, LimitPredictBatchesAcceptsCountsAndFractions) {
  TemporaryDirectory dir;
  auto model = std::make_shared<RegressionModule>();
  const auto data = std::make_shared<RegressionData>(16, 8, false, 0, 40);  // 5 predict batches of 8
  const auto predict_with = [&](const std::vector<std::string>& limit) {
    std::vector<std::string> flags{"--default-root-dir", dir.path(), "--logger", "none", "--enable-progress-bar=false"};
    flags.insert(flags.end(), limit.begin(), limit.end());
    Trainer trainer(options_from_args(flags));
    return trainer.predict(model, data);
  };
  EXPECT_EQ(predict_with({}).size(), 5u);
  EXPECT_EQ(predict_with({"--limit-predict-batches", "3"}).size(), 3u);
  EXPECT_EQ(predict_with({"--limit-predict-batches", "0.4"}).size(), 2u);
  const auto limited = predict_with({"--limit-predict-batches", "2"});
  ASSERT_EQ(limited.size(), 2u);
  // The first batches, in order: the model's outputs for samples 0-15.
  const auto first = data->predict_dataloader()->batch(0);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::allclose(limited[0], model->linear->forward(first.input)));
}

// Issue 21.6: fast_dev_run is a smoke test (Lightning's rule): it writes no logs, no
// hparams.yaml and no checkpoints, whatever loggers and checkpoint callbacks are configured. The
// same configuration without it writes all three, so the check can see them.
TEST(Limits, FastDevRunWritesNothing) {
  const std::vector<std::string> writers{"--logger", "csv", "tensorboard", "--callback",
                                         "model_checkpoint:every_n_train_steps=1,save_last=true",
                                         "--enable-checkpointing=true", "--max-epochs", "2",
                                         "--enable-progress-bar=false"};
  const auto files_after = [&](const std::string& root, const std::vector<std::string>& extra) {
    std::vector<std::string> flags{"--default-root-dir", root};
    flags.insert(flags.end(), writers.begin(), writers.end());
    flags.insert(flags.end(), extra.begin(), extra.end());
    Trainer trainer(options_from_args(flags));
    const auto model = std::make_shared<RegressionModule>();
    const auto data = std::make_shared<RegressionData>(32, 8, false, 0, 16);
    trainer.fit(model, data);
    trainer.validate(model, data);
    trainer.predict(model, data);
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) files.push_back(entry.path().string());
    return files;
  };
  TemporaryDirectory written, smoke;
  const auto normal = files_after(written.path(), {});
  const auto has = [&](const std::string& suffix) {
    return std::any_of(normal.begin(), normal.end(), [&](const std::string& f) { return f.ends_with(suffix); });
  };
  EXPECT_TRUE(has("metrics.csv") && has("hparams.yaml") && has("last.ckpt")) << "the control wrote nothing";
  EXPECT_EQ(files_after(smoke.path(), {"--fast-dev-run", "2"}), std::vector<std::string>{});
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
