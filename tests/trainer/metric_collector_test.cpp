// log() aggregation: Lightning's per-hook defaults, batch-size weighted epoch means, the other
// reductions, _step/_epoch naming, sync_dist through the strategy's reduction, and bad input.
#include <gtest/gtest.h>

#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"
#include "trainer/metrics/metric_collector.h"
#include "trainer/metrics/metric_map.h"

namespace volt::testing {
namespace {

// The values as numbers (the collector leaves them on their device until read).
struct ReadValues {
  std::map<std::string, double> logger, prog_bar, callback;
};
ReadValues read(const MetricValues& values) {
  return {read_metrics(values.logger), read_metrics(values.prog_bar), read_metrics(values.callback)};
}

MetricCollector::SyncFn identity() {
  return [](const torch::Tensor& t, ReduceOp) { return t; };
}

torch::Tensor scalar(double v) { return torch::tensor(v); }

TEST(MetricCollector, ValidationLogsOnEpochAsABatchSizeWeightedMean) {
  MetricCollector collector(identity());
  collector.reset(RunningStage::Validating);
  // Batches of 4, 4 and a last batch of 2 with per-batch means 1, 2, 10.
  const std::vector<std::pair<int64_t, double>> batches{{4, 1.0}, {4, 2.0}, {2, 10.0}};
  for (const auto& [size, value] : batches) {
    collector.begin_batch();
    collector.set_in_step(true, size);
    collector.log("val_loss", scalar(value), {});
    EXPECT_TRUE(read(collector.step_values()).logger.empty()) << "validation must not log per step by default";
  }
  const auto epoch = read(collector.epoch_values());
  EXPECT_DOUBLE_EQ(epoch.callback.at("val_loss"), (4 * 1.0 + 4 * 2.0 + 2 * 10.0) / 10.0);
  EXPECT_DOUBLE_EQ(epoch.logger.at("val_loss"), epoch.callback.at("val_loss"));
}

TEST(MetricCollector, TrainingLogsOnStepByDefault) {
  MetricCollector collector(identity());
  collector.reset(RunningStage::Training);
  collector.begin_batch();
  collector.set_in_step(true, 8);
  collector.log("train_loss", scalar(0.5), {.prog_bar = true});
  const auto step = read(collector.step_values());
  EXPECT_DOUBLE_EQ(step.logger.at("train_loss"), 0.5);
  EXPECT_DOUBLE_EQ(step.prog_bar.at("train_loss"), 0.5);
  EXPECT_TRUE(read(collector.epoch_values()).logger.empty());
}

TEST(MetricCollector, OnStepAndOnEpochSplitIntoStepAndEpochNames) {
  MetricCollector collector(identity());
  collector.reset(RunningStage::Training);
  for (double v : {1.0, 3.0}) {
    collector.begin_batch();
    collector.set_in_step(true, 1);
    collector.log("loss", scalar(v), {.on_step = true, .on_epoch = true});
  }
  EXPECT_DOUBLE_EQ(read(collector.step_values()).logger.at("loss_step"), 3.0);
  const auto epoch = read(collector.epoch_values());
  EXPECT_DOUBLE_EQ(epoch.logger.at("loss_epoch"), 2.0);
  EXPECT_DOUBLE_EQ(epoch.callback.at("loss"), 2.0);
}

TEST(MetricCollector, ReductionsAndExplicitBatchSize) {
  MetricCollector collector(identity());
  collector.reset(RunningStage::Validating);
  const std::vector<double> values{3.0, -1.0, 5.0};
  for (double v : values) {
    collector.begin_batch();
    collector.set_in_step(true, 1);
    collector.log("sum", scalar(v), {.reduce_fx = ReduceFx::Sum});
    collector.log("max", scalar(v), {.reduce_fx = ReduceFx::Max});
    collector.log("min", scalar(v), {.reduce_fx = ReduceFx::Min});
    collector.log("weighted", scalar(v), {.batch_size = v > 0 ? 3 : 1});
  }
  const auto epoch = read(collector.epoch_values()).callback;
  EXPECT_DOUBLE_EQ(epoch.at("sum"), 7.0);
  EXPECT_DOUBLE_EQ(epoch.at("max"), 5.0);
  EXPECT_DOUBLE_EQ(epoch.at("min"), -1.0);
  EXPECT_DOUBLE_EQ(epoch.at("weighted"), (3 * 3.0 - 1.0 + 3 * 5.0) / 7.0);
}

TEST(MetricCollector, SyncDistGoesThroughTheReduction) {
  int calls = 0;
  // A stand-in for two ranks where the other rank logged the same values plus 2.
  MetricCollector collector([&](const torch::Tensor& t, ReduceOp op) {
    ++calls;
    return op == ReduceOp::Sum ? t * 2 + 2 : t + 1;
  });
  collector.reset(RunningStage::Validating);
  collector.begin_batch();
  collector.set_in_step(true, 1);
  collector.log("acc", scalar(0.5), {.sync_dist = true});
  collector.log("local", scalar(0.5), {});
  const auto epoch = read(collector.epoch_values()).callback;
  EXPECT_GT(calls, 0);
  EXPECT_NE(epoch.at("acc"), 0.5) << "a sync_dist value must be reduced across ranks";
  EXPECT_DOUBLE_EQ(epoch.at("local"), 0.5);
}

TEST(MetricCollector, BadInputIsAConfigurationError) {
  MetricCollector collector(identity());
  collector.reset(RunningStage::Training);
  collector.begin_batch();
  collector.set_in_step(true, 1);
  EXPECT_THROW(collector.log("", scalar(1), {}), ConfigurationError);
  EXPECT_THROW(collector.log("vector", torch::ones({2}), {}), ConfigurationError);
  collector.log("x", scalar(1), {.reduce_fx = ReduceFx::Sum});
  EXPECT_THROW(collector.log("x", scalar(1), {.reduce_fx = ReduceFx::Max}), ConfigurationError);
}

// Through the Trainer: training_step's values reach logged_metrics per step, validation's per
// epoch, and the training epoch mean is weighted by batch size (the last batch is smaller).
class LoggingModule : public RegressionModule {
 public:
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    log("batch_size", static_cast<double>(batch.size()), {.on_step = false, .on_epoch = true});
    log("batch_index", static_cast<double>(batch_idx));
    return RegressionModule::training_step(batch, batch_idx);
  }
};

TEST(MetricCollector, TrainerAppliesTheDefaultsOfEachHook) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.log_every_n_steps = 1;
  options.loggers = {"csv"};
  auto model = std::make_shared<LoggingModule>();
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<RegressionData>(20, 8, false, 0, 16));  // batches 8, 8, 4
  EXPECT_DOUBLE_EQ(trainer.logged_metrics().at("batch_index"), 2.0);
  EXPECT_DOUBLE_EQ(trainer.callback_metrics().at("batch_size"), (8.0 * 8 + 8.0 * 8 + 4.0 * 4) / 20.0);
  EXPECT_TRUE(trainer.callback_metrics().count("val_loss"));
}

}  // namespace
}  // namespace volt::testing
