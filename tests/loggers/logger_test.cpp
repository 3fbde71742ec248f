// The Logger interface as the Trainer drives it: several loggers get the same calls in the order
// they were added (hyperparameters first, finalize with the run's status last), and a rank other
// than global rank 0 calls none of them and writes no log files.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/test_doubles.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// Appends "<tag> <call>" to a journal shared by several loggers.
class RecordingLogger : public Logger {
 public:
  RecordingLogger(std::vector<std::string>& journal, std::string tag) : journal_(journal), tag_(std::move(tag)) {}
  std::string name() const override { return "recording"; }
  int64_t version() const override { return 0; }
  std::string log_dir() const override { return ""; }

  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
    std::string call = "metrics step=" + std::to_string(step);
    for (const auto& [name, value] : metrics) call += " " + name;
    note(call);
  }
  void log_hyperparams(const Hyperparameters& hparams) override { note("hparams " + std::to_string(hparams.size())); }
  void log_epoch_end(const torch::nn::Module&, int64_t epoch, int64_t step) override {
    note("epoch_end " + std::to_string(epoch) + " step=" + std::to_string(step));
  }
  void finalize(TrainerStatus status) override { note("finalize " + to_string(status)); }

 private:
  void note(const std::string& call) { journal_.push_back(tag_ + " " + call); }
  std::vector<std::string>& journal_;
  std::string tag_;
};

class HyperparameterModule : public RegressionModule {
 public:
  HyperparameterModule() { save_hyperparameters({{"lr", 0.05}, {"features", int64_t{8}}}); }
};

class FailingModule : public RegressionModule {
 public:
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    if (current_epoch() == 1) throw std::runtime_error("broken batch");
    return RegressionModule::training_step(batch, batch_idx);
  }
};

std::vector<std::string> fit_recorded(std::shared_ptr<Module> module, std::shared_ptr<Strategy> strategy,
                                      const std::string& root) {
  std::vector<std::string> journal;
  auto options = quiet_options(root);
  options.max_epochs = 2;
  options.log_every_n_steps = 2;
  options.loggers = {"csv", "tensorboard"};
  auto trainer = strategy ? std::make_unique<Trainer>(options, strategy) : std::make_unique<Trainer>(options);
  trainer->add_logger(std::make_shared<RecordingLogger>(journal, "A"));
  trainer->add_logger(std::make_shared<RecordingLogger>(journal, "B"));
  try {
    trainer->fit(module, std::make_shared<RegressionData>(32, 8, false, 0, 8));  // 4 steps per epoch
  } catch (const std::runtime_error&) {
  }
  return journal;
}

TEST(Logger, SeveralLoggersGetTheSameCallsInOrder) {
  TemporaryDirectory dir;
  const auto journal = fit_recorded(std::make_shared<HyperparameterModule>(), nullptr, dir.path());
  // Each call reaches A, then B, with the same arguments.
  ASSERT_EQ(journal.size() % 2, 0u);
  std::vector<std::string> calls;
  for (size_t i = 0; i < journal.size(); i += 2) {
    ASSERT_EQ(journal[i].substr(0, 2), "A ");
    ASSERT_EQ(journal[i + 1], "B " + journal[i].substr(2)) << "call " << i / 2;
    calls.push_back(journal[i].substr(2));
  }
  // Training loss every 2 steps (log_every_n_steps), then the epoch's validation loss, per epoch.
  const std::vector<std::string> expected{"hparams 2",
                                          "metrics step=2 epoch train_loss",
                                          "metrics step=4 epoch train_loss",
                                          "metrics step=4 epoch val_loss",
                                          "epoch_end 0 step=4",
                                          "metrics step=6 epoch train_loss",
                                          "metrics step=8 epoch train_loss",
                                          "metrics step=8 epoch val_loss",
                                          "epoch_end 1 step=8",
                                          "finalize finished"};
  EXPECT_EQ(calls, expected);
}

TEST(Logger, AFailedFitFinalizesAsInterrupted) {
  TemporaryDirectory dir;
  const auto journal = fit_recorded(std::make_shared<FailingModule>(), nullptr, dir.path());
  ASSERT_GE(journal.size(), 2u);
  EXPECT_EQ(journal[journal.size() - 2], "A finalize interrupted");
  EXPECT_EQ(journal.back(), "B finalize interrupted");
}

TEST(Logger, OnlyGlobalRankZeroLogs) {
  TemporaryDirectory dir;
  EXPECT_EQ(fit_recorded(std::make_shared<HyperparameterModule>(), std::make_shared<SecondRankStrategy>(), dir.path()),
            std::vector<std::string>{});
  EXPECT_FALSE(std::filesystem::exists(dir.file("volt_logs"))) << "no CSV or TensorBoard files on rank 1";
}

}  // namespace
}  // namespace volt::testing
