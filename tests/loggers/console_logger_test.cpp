// ConsoleLogger: a table per epoch with every metric logged during it, and the Trainer's default of
// adding one when the progress bar is off.
#include <gtest/gtest.h>

#include <sstream>

#include "loggers/console_logger.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ConsoleLogger, PrintsTheLatestValueOfEachMetricOncePerEpoch) {
  std::ostringstream out;
  ConsoleLogger logger(&out);
  torch::nn::Linear module(1, 1);
  logger.log_metrics({{"loss", 2.0}, {"epoch", 0}}, 1);
  logger.log_metrics({{"loss", 1.5}, {"epoch", 0}}, 2);
  logger.log_metrics({{"val_acc", 0.25}, {"epoch", 0}}, 2);
  EXPECT_EQ(out.str(), "") << "nothing before the epoch ends";
  logger.log_epoch_end(*module, 0, 2);
  EXPECT_EQ(out.str(), ConsoleLogger::table("Epoch 0 (step 2)", {{"loss", 1.5}, {"val_acc", 0.25}}));
  EXPECT_NE(out.str().find("val_acc"), std::string::npos);
  EXPECT_NE(out.str().find("1.5"), std::string::npos);
  EXPECT_EQ(out.str().find("epoch  "), std::string::npos) << "epoch is the title, not a row";
  out.str("");
  logger.log_epoch_end(*module, 1, 2);
  EXPECT_EQ(out.str(), "") << "an epoch without metrics prints nothing";
  logger.log_metrics({{"test_acc", 0.5}}, 2);
  logger.finalize(TrainerStatus::Finished);
  EXPECT_EQ(out.str(), ConsoleLogger::table("Results", {{"test_acc", 0.5}}));
}

TEST(ConsoleLogger, TheTrainerAddsOneWhenTheProgressBarIsOffUnlessThereAreNoLoggers) {
  for (bool with_loggers : {true, false}) {
    TemporaryDirectory dir;
    auto options = quiet_options(dir.path());
    options.max_epochs = 2;
    options.log_every_n_steps = 1;
    if (with_loggers) options.loggers = {"csv"};
    Trainer trainer(options);
    ::testing::internal::CaptureStdout();
    trainer.fit(std::make_shared<RegressionModule>(), std::make_shared<RegressionData>(16, 8, false, 0, 8));
    const std::string output = ::testing::internal::GetCapturedStdout();
    if (with_loggers) {
      EXPECT_EQ(count_of(output, "Epoch 0 (step 2)"), 1u) << output;
      EXPECT_EQ(count_of(output, "Epoch 1 (step 4)"), 1u) << output;
      EXPECT_EQ(count_of(output, "val_loss"), 2u) << output;
      EXPECT_EQ(count_of(output, "train_loss"), 2u) << output;
    } else {
      EXPECT_EQ(output, "") << "--logger none: nothing on the terminal";
    }
  }
}

}  // namespace
}  // namespace volt::testing
