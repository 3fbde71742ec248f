// ThroughputMonitor: rates over a window of batches measured on the host clock with validation left
// out, the FLOPs and MFU derived from them, logged every log_every_n_steps and shown on the bar.
#include <gtest/gtest.h>

#include <thread>

#include "callbacks/throughput_monitor.h"
#include "core/device_peak_flops.h"
#include "tests/support/recording_logger.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// Each training batch takes at least 4 ms, each validation batch 30 ms.
class ThrottledModule : public RegressionModule {
 public:
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(4));
    return RegressionModule::training_step(batch, batch_idx);
  }
  void validation_step(const Batch& batch, int64_t batch_idx) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    RegressionModule::validation_step(batch, batch_idx);
  }
};

TEST(ThroughputMonitor, RatesOverTheWindowWithoutValidationTime) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.log_every_n_steps = 10;
  options.val_check_interval = BatchLimit::count(10);  // 2 validation batches (60 ms) per 10 training batches (40 ms)
  auto logger = std::make_shared<RecordingLogger>();
  auto monitor = std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{
      .window = 20, .flops_per_sample = 100, .peak_flops = 1e6, .items_per_sample = 3});
  Trainer trainer(options);
  trainer.add_logger(logger);
  trainer.add_callback(monitor);
  trainer.fit(std::make_shared<ThrottledModule>(), std::make_shared<RegressionData>(160, 4, false, 0, 8));

  const auto batches = logger->series("train/device/batches_per_sec");
  ASSERT_EQ(batches.size(), 4u) << "logged at steps 10, 20, 30, 40";
  EXPECT_EQ(batches[0].first, 10);
  for (const auto& [step, rate] : logger->rows) {
    if (!rate.count("train/batches_per_sec")) continue;
    const double per_batch = rate.at("train/device/batches_per_sec");
    // At most one batch per 4 ms; with the 60 ms of validation per 10 batches counted it would be
    // below 100 a second.
    EXPECT_LE(per_batch, 250.0) << "step " << step;
    EXPECT_GE(per_batch, 120.0) << "step " << step << ": validation time counted?";
    EXPECT_DOUBLE_EQ(rate.at("train/device/samples_per_sec"), 4 * per_batch);
    EXPECT_DOUBLE_EQ(rate.at("train/device/items_per_sec"), 12 * per_batch);
    EXPECT_DOUBLE_EQ(rate.at("train/device/flops_per_sec"), 400 * per_batch);
    EXPECT_DOUBLE_EQ(rate.at("train/device/mfu"), 400 * per_batch / 1e6);
    EXPECT_DOUBLE_EQ(rate.at("train/samples_per_sec"), rate.at("train/device/samples_per_sec")) << "one process";
  }
  const auto& bar = trainer.progress_bar_metrics();
  EXPECT_TRUE(bar.count("train/items_per_sec") && bar.count("train/device/mfu"));
}

TEST(ThroughputMonitor, ItemsFromTheBatchAndNoMfuWithoutAPeak) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.log_every_n_steps = 5;
  auto logger = std::make_shared<RecordingLogger>();
  Trainer trainer(options);
  trainer.add_logger(logger);
  trainer.add_callback(std::make_shared<ThroughputMonitor>(ThroughputMonitorOptions{
      .flops_per_sample = 10, .items = [](const Batch& b) { return b.input.numel(); }}));
  trainer.fit(std::make_shared<RegressionModule>(), std::make_shared<RegressionData>(80, 4));
  ASSERT_FALSE(logger->rows.empty());
  for (const auto& [step, rate] : logger->rows) {
    if (!rate.count("train/samples_per_sec")) continue;
    // 8 features per sample.
    EXPECT_NEAR(rate.at("train/items_per_sec"), 8 * rate.at("train/samples_per_sec"), 1e-9 * rate.at("train/items_per_sec"));
    EXPECT_GT(rate.at("train/flops_per_sec"), 0);
    EXPECT_EQ(rate.count("train/device/mfu"), 0u) << "a CPU has no known peak";
  }
}

TEST(ThroughputMonitor, KnownPeaksAndBadOptions) {
  EXPECT_EQ(known_peak_flops("NVIDIA H200", torch::kBFloat16), 989.4e12);
  EXPECT_EQ(known_peak_flops("NVIDIA H100 80GB HBM3", torch::kHalf), 989.4e12);
  EXPECT_EQ(known_peak_flops("NVIDIA H100 PCIe", torch::kBFloat16), 756e12);
  EXPECT_EQ(known_peak_flops("NVIDIA A100-SXM4-80GB", torch::kFloat), 19.5e12);
  EXPECT_FALSE(known_peak_flops("Some GPU", torch::kBFloat16).has_value());
  EXPECT_FALSE(device_name(torch::kCPU).has_value());
  EXPECT_THROW(ThroughputMonitor(ThroughputMonitorOptions{.window = 1}), ConfigurationError);
  EXPECT_THROW(ThroughputMonitor(ThroughputMonitorOptions{.peak_flops = -1}), ConfigurationError);
}

}  // namespace
}  // namespace volt::testing
