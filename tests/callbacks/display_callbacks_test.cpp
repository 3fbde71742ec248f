// ProgressBar and ModelSummary: what they print, when, and only on global rank 0.
#include <gtest/gtest.h>

#include <regex>

#include "tests/support/test_doubles.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

class ProgBarModule : public RegressionModule {
 public:
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    auto loss = RegressionModule::training_step(batch, batch_idx);
    log("loss", loss, {.prog_bar = true});
    return loss;
  }
  void validation_step(const Batch& batch, int64_t batch_idx) override {
    log("val_mse", torch::mse_loss(linear(batch.input), batch.target), {.prog_bar = true});
  }
};

std::string fit_output(std::shared_ptr<Callback> bar, std::shared_ptr<Strategy> strategy = nullptr,
                       bool summary = false) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.enable_model_summary = summary;
  auto trainer = strategy ? std::make_unique<Trainer>(options, strategy) : std::make_unique<Trainer>(options);
  if (bar) trainer->add_callback(bar);
  ::testing::internal::CaptureStdout();
  trainer->fit(std::make_shared<ProgBarModule>(), std::make_shared<RegressionData>(32, 8, false, 0, 8));
  return ::testing::internal::GetCapturedStdout();
}

std::vector<std::string> lines_matching(const std::string& text, const std::string& pattern) {
  std::vector<std::string> out;
  const std::regex re(pattern);
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, re)) out.push_back(line);
  }
  return out;
}

TEST(ProgressBar, PlainModePrintsALinePerUpdateWithRateEtaAndProgBarMetrics) {
  const auto output = fit_output(std::make_shared<ProgressBar>(2, /*force_plain=*/true));
  EXPECT_EQ(output.find('\r'), std::string::npos) << "no carriage returns when not drawing in place";
  const auto epoch_lines = lines_matching(output, "^Epoch 0: ");
  ASSERT_EQ(epoch_lines.size(), 3u) << output;  // 2/4, 4/4, and the epoch's final line
  EXPECT_TRUE(std::regex_search(epoch_lines[0], std::regex(R"(^Epoch 0: 2/4 \[\d+:\d\d<\d+:\d\d, [0-9.]+it/s\] loss=)")))
      << epoch_lines[0];
  EXPECT_TRUE(std::regex_search(epoch_lines[1], std::regex(R"(^Epoch 0: 4/4 \[\d+:\d\d, [0-9.]+it/s\])")))
      << "no ETA when done: " << epoch_lines[1];
  const auto validation = lines_matching(output, "^Validation \\(epoch 0, step 4\\)");
  ASSERT_EQ(validation.size(), 1u) << output;
  EXPECT_NE(validation[0].find("val_mse="), std::string::npos) << validation[0];
}

TEST(ProgressBar, OnlyGlobalRankZeroPrints) {
  EXPECT_EQ(fit_output(std::make_shared<ProgressBar>(1, true), std::make_shared<SecondRankStrategy>(), true), "");
  EXPECT_NE(fit_output(std::make_shared<ProgressBar>(1, true)), "");
}

TEST(ProgressBar, ComesFromTheRegistryWithItsOptions) {
  EXPECT_NE(std::dynamic_pointer_cast<ProgressBar>(callback_registry().create("progress_bar:refresh_rate=5,plain=true")),
            nullptr);
  EXPECT_THROW(callback_registry().create("progress_bar:refresh=5"), ConfigurationError);
  EXPECT_THROW(callback_registry().create("progress_bar:refresh_rate=0"), ConfigurationError);
}

TEST(ModelSummary, CountsTrainableAndFrozenParametersPerModule) {
  torch::nn::Sequential net(torch::nn::Linear(4, 3), torch::nn::ReLU(), torch::nn::Linear(3, 2));
  for (auto& p : net[2]->parameters()) p.set_requires_grad(false);
  const auto table = ModelSummary::summarize(*net, 1);
  EXPECT_TRUE(std::regex_search(table, std::regex(R"(0\| 0 +\| Linear +\| 15\n)"))) << table;
  EXPECT_TRUE(std::regex_search(table, std::regex(R"(1\| 1 +\| ReLU +\| 0\n)"))) << table;
  EXPECT_TRUE(std::regex_search(table, std::regex(R"(2\| 2 +\| Linear +\| 8\n)"))) << table;
  EXPECT_NE(table.find("15        Trainable params"), std::string::npos) << table;
  EXPECT_NE(table.find("8         Non-trainable params"), std::string::npos) << table;
  EXPECT_NE(table.find("23        Total params"), std::string::npos) << table;
  EXPECT_NE(table.find("0.000     Total estimated model params size (MB)"), std::string::npos) << table;

  torch::nn::Linear big(1000, 1000);
  const auto big_table = ModelSummary::summarize(*big, 1);
  EXPECT_NE(big_table.find("1.0 M     Total params"), std::string::npos) << big_table;
  EXPECT_NE(big_table.find("4.004     Total estimated model params size (MB)"), std::string::npos) << big_table;
}

TEST(ModelSummary, PrintedAtFitStartOnRankZeroOnly) {
  const auto output = fit_output(nullptr, nullptr, /*summary=*/true);
  EXPECT_NE(output.find("| linear | Linear | 9"), std::string::npos) << output;
  EXPECT_NE(output.find("CPU threads per process: "), std::string::npos) << output;
  EXPECT_EQ(fit_output(nullptr, std::make_shared<SecondRankStrategy>(), true), "");
}

}  // namespace
}  // namespace volt::testing
