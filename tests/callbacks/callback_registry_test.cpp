// Callbacks and loggers by name: from the command line with options, user registrations, and
// errors that list what exists.
#include <gtest/gtest.h>

#include "loggers/tensorboard_logger.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

template <typename T>
std::vector<std::shared_ptr<T>> of_type(const std::vector<std::shared_ptr<Callback>>& callbacks) {
  std::vector<std::shared_ptr<T>> out;
  for (const auto& c : callbacks) {
    if (auto typed = std::dynamic_pointer_cast<T>(c)) out.push_back(typed);
  }
  return out;
}

class CountingCallback : public Callback {
 public:
  explicit CountingCallback(int64_t every) : every_(every) {}
  void on_train_batch_end(Trainer&, Module&, const torch::Tensor&, const Batch&, int64_t b) override {
    if ((b + 1) % every_ == 0) ++count;
  }
  int64_t count = 0;

 private:
  int64_t every_;
};

TEST(CallbackRegistry, RepeatedCallbackFlagsBuildEachWithItsOptions) {
  TemporaryDirectory dir;
  const auto options = options_from_args({"--callback", "early_stopping:monitor=val_loss,patience=1", "--callback",
                              "early_stopping:monitor=val_acc,mode=max", "--callback", "timer:duration=00:01:00:00",
                              "--default-root-dir", dir.path(), "--logger", "none"});
  Trainer trainer(options);
  const auto stoppers = of_type<EarlyStopping>(trainer.callbacks());
  ASSERT_EQ(stoppers.size(), 2u);
  EXPECT_EQ(stoppers[0]->options().monitor, "val_loss");
  EXPECT_EQ(stoppers[0]->options().patience, 1);
  EXPECT_EQ(stoppers[1]->options().mode, MonitorMode::Max);
  EXPECT_NE(stoppers[0]->state_key(), stoppers[1]->state_key()) << "both fit in one checkpoint";
  ASSERT_EQ(of_type<Timer>(trainer.callbacks()).size(), 1u);
  EXPECT_EQ(of_type<Timer>(trainer.callbacks())[0]->duration().count(), 3600);
}

TEST(CallbackRegistry, UsersRegisterTheirOwn) {
  if (!callback_registry().contains("counting")) {
    callback_registry().add("counting", "counts batches", {{"every", OptionType::Int, "1", "count every n batches"}},
                            [](const OptionValues& o) { return std::make_shared<CountingCallback>(o.get_int("every")); });
  }
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.callbacks = {"counting:every=2"};
  Trainer trainer(options);
  trainer.fit(std::make_shared<RegressionModule>(), std::make_shared<RegressionData>(64, 8));
  const auto counters = of_type<CountingCallback>(trainer.callbacks());
  ASSERT_EQ(counters.size(), 1u);
  EXPECT_EQ(counters[0]->count, 4);
  EXPECT_NE(callback_registry().describe().find("counting  counts batches"), std::string::npos);
}

TEST(CallbackRegistry, UnknownNamesAndKeysAreErrorsThatListWhatExists) {
  try {
    Trainer trainer(options_from_args({"--callback", "early_stoping:monitor=x"}));
    FAIL() << "expected a ConfigurationError";
  } catch (const ConfigurationError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("did you mean 'early_stopping'"), std::string::npos) << message;
    for (const char* name : {"ema", "gradient_accumulation_scheduler", "learning_rate_monitor", "model_summary",
                             "progress_bar", "timer"}) {
      EXPECT_NE(message.find(name), std::string::npos) << name << " missing from: " << message;
    }
  }
  EXPECT_THROW(Trainer(options_from_args({"--callback", "ema:decay=0.9,every=3"})), ConfigurationError);
  EXPECT_THROW(Trainer(options_from_args({"--callback", "ema:decay=high"})), ConfigurationError);
}

TEST(CallbackRegistry, ListCallbacksAndListLoggersDescribeEveryBuiltIn) {
  try {
    options_from_args({"--list-callbacks"});
    FAIL() << "expected HelpRequested";
  } catch (const HelpRequested& help) {
    const std::string text = help.what();
    for (const char* entry : {"early_stopping", "stopping_threshold", "timer", "ema", "learning_rate_monitor",
                              "gradient_accumulation_scheduler", "scheduling"}) {
      EXPECT_NE(text.find(entry), std::string::npos) << entry;
    }
  }
  try {
    options_from_args({"--list-loggers"});
    FAIL() << "expected HelpRequested";
  } catch (const HelpRequested& help) {
    const std::string text = help.what();
    for (const char* entry : {"csv", "tensorboard", "histogram_every_n_epochs", "console"}) {
      EXPECT_NE(text.find(entry), std::string::npos) << entry;
    }
  }
}

TEST(LoggerRegistry, SeveralLoggersFromTheCommandLineShareTheRunDirectory) {
  TemporaryDirectory dir;
  Trainer trainer(options_from_args({"--logger", "tensorboard", "--logger", "csv", "--default-root-dir", dir.path()}));
  ASSERT_EQ(trainer.loggers().size(), 2u);
  EXPECT_NE(dynamic_cast<TensorBoardLogger*>(trainer.loggers()[0].get()), nullptr);
  EXPECT_EQ(trainer.loggers()[0]->log_dir(), dir.path() + "/volt_logs/version_0");
  EXPECT_EQ(trainer.loggers()[1]->log_dir(), dir.path() + "/volt_logs/version_0");
  EXPECT_EQ(trainer.log_dir(), dir.path() + "/volt_logs/version_0");
  EXPECT_THROW(Trainer(options_from_args({"--logger", "tensorboard:histogram_every_n_epochs=-1"})), ConfigurationError);
}

}  // namespace
}  // namespace volt::testing
