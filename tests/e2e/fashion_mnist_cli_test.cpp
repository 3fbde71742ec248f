// The main job's binary, end to end, as a user runs it: a short training run that writes
// Lightning's CSV layout and prints the final test metrics; clear errors for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

const std::string kSmallRun =
    " --limit-train-batches 12 --limit-val-batches 4 --limit-test-batches 4"
    " --batch-size 64 --log-every-n-steps 4 --enable-progress-bar=false --enable-checkpointing=false"
    " --seed 1";

ProcessResult run_example(const std::string& flags) {
  return run_command(built_binary("examples/fashion_mnist") + flags + " 2>&1", 300);
}

TEST(FashionMnistCli, ASmallRunWritesMetricsCsvAndPrintsTestMetrics) {
  TemporaryDirectory dir;
  const auto result = run_example(kSmallRun + " --max-epochs 2 --default-root-dir " + dir.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("Final test metrics:"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("test_acc"), std::string::npos) << result.output;

  const std::string version = dir.file("volt_logs/version_0");
  ASSERT_TRUE(std::filesystem::exists(version + "/hparams.yaml"));
  const auto rows = read_csv(version + "/metrics.csv");
  ASSERT_FALSE(rows.empty());
  std::set<std::string> columns;
  int train_rows = 0, val_rows = 0, test_rows = 0;
  int64_t last_step = -1;
  for (const auto& row : rows) {
    for (const auto& [column, value] : row) columns.insert(column);
    ASSERT_TRUE(row.count("step") && row.count("epoch")) << "every row has step and epoch";
    if (row.count("train_loss")) {
      ++train_rows;
      const int64_t step = std::stoll(row.at("step"));
      EXPECT_GT(step, last_step) << "logged steps increase";
      EXPECT_EQ(step % 4, 0) << "logged every 4 optimizer steps (step = optimizer steps taken so far)";
      last_step = step;
    }
    if (row.count("val_acc")) {
      ++val_rows;
      const double acc = std::stod(row.at("val_acc"));
      EXPECT_GE(acc, 0.0);
      EXPECT_LE(acc, 1.0);
    }
    if (row.count("test_acc")) ++test_rows;
  }
  for (const char* c : {"step", "epoch", "train_loss", "val_loss", "val_acc", "test_loss", "test_acc"}) {
    EXPECT_TRUE(columns.count(c)) << "missing column " << c;
  }
  EXPECT_EQ(train_rows, 2 * 12 / 4);
  EXPECT_EQ(val_rows, 2);
  EXPECT_EQ(test_rows, 1);

  // A second run gets the next version directory.
  ASSERT_EQ(run_example(kSmallRun + " --max-epochs 1 --default-root-dir " + dir.path()).exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(dir.file("volt_logs/version_1/metrics.csv")));
}

// Issue 21.6: --fast-dev-run through the main job's command line: it trains, validates and tests a
// couple of batches and leaves nothing behind (its default CSV logger and checkpoint callback
// included, and those asked for on the command line).
TEST(FashionMnistCli, FastDevRunWritesNothing) {
  TemporaryDirectory dir;
  const auto result = run_example(" --fast-dev-run 2 --batch-size 64 --enable-progress-bar=false --logger csv tensorboard"
                                  " --callback model_checkpoint:save_last=true --default-root-dir " + dir.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("Final test metrics:"), std::string::npos) << result.output;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "fast_dev_run wrote into " << dir.path();
}

TEST(FashionMnistCli, AnUnknownFlagFailsNamingTheClosestOne) {
  const auto result = run_example(" --max-epoch 1");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("did you mean '--max-epochs'"), std::string::npos) << result.output;
}

TEST(FashionMnistCli, AMissingDatasetNamesTheDebianPackage) {
  TemporaryDirectory dir;
  const auto result = run_example(kSmallRun + " --max-epochs 1 --data-dir " + dir.file("nowhere"));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("dataset-fashion-mnist"), std::string::npos) << result.output;
}

TEST(FashionMnistCli, HelpListsVoltAndExampleFlags) {
  const auto result = run_example(" --help");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.output.find("--max-epochs"), std::string::npos);
  EXPECT_NE(result.output.find("--batch-size"), std::string::npos);
}

}  // namespace
}  // namespace volt::testing
