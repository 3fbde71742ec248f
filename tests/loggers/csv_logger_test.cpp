// CSVLogger: Lightning's layout and versioning, metrics.csv content as logged during fit, columns
// that appear late, and hparams.yaml read back by PyYAML.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loggers/csv_logger.h"
#include "loggers/hparams_yaml.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

TEST(CSVLogger, VersionsCountUpAndLoggersBuiltTogetherShareOne) {
  TemporaryDirectory dir;
  {
    CSVLogger first(dir.path());
    EXPECT_EQ(first.version(), 0);
    EXPECT_EQ(first.log_dir(), dir.path() + "/volt_logs/version_0");
    first.log_hyperparams({});
  }
  std::filesystem::create_directories(dir.path() + "/volt_logs/version_7");
  std::filesystem::create_directories(dir.path() + "/volt_logs/not_a_version_9");
  CSVLogger a(dir.path()), b(dir.path());
  EXPECT_EQ(a.version(), 8) << "one past the largest version_<N>";
  EXPECT_EQ(b.version(), 8) << "decided at construction, before either created its directory";
  a.log_hyperparams({});
  EXPECT_EQ(CSVLogger(dir.path(), "volt_logs", 3).log_dir(), dir.path() + "/volt_logs/version_3");
  EXPECT_EQ(CSVLogger(dir.path(), "other").version(), 0);
  EXPECT_THROW(CSVLogger(dir.path(), "volt_logs", -2), ConfigurationError);
  EXPECT_THROW(CSVLogger(dir.path(), "volt_logs", -1, 0), ConfigurationError);
}

TEST(CSVLogger, AColumnThatAppearsLateWidensTheFileAndOldRowsGetBlanks) {
  TemporaryDirectory dir;
  CSVLogger logger(dir.path(), "run", 0, /*flush_every_n_steps=*/2);
  logger.log_metrics({{"loss", 1.5}, {"epoch", 0}}, 1);
  logger.log_metrics({{"loss", 1.25}, {"epoch", 0}}, 2);  // second row: flushed
  const std::string path = logger.log_dir() + "/metrics.csv";
  EXPECT_EQ(file_text(path), "step,epoch,loss\n1,0,1.5\n2,0,1.25\n");
  logger.log_metrics({{"acc", 0.5}, {"epoch", 0}}, 2);
  logger.log_metrics({{"loss", 1}, {"a,b", 2}, {"epoch", 1}}, 3);
  // New columns in the order they first appear (acc, then "a,b", which needs quoting).
  EXPECT_EQ(file_text(path), "step,epoch,loss,acc,\"a,b\"\n1,0,1.5,,\n2,0,1.25,,\n2,0,,0.5,\n3,1,1,,2\n");
  logger.log_metrics({{"loss", 0.75}, {"epoch", 1}}, 4);
  logger.finalize(TrainerStatus::Finished);
  EXPECT_EQ(file_text(path), "step,epoch,loss,acc,\"a,b\"\n1,0,1.5,,\n2,0,1.25,,\n2,0,,0.5,\n3,1,1,,2\n4,1,0.75,,\n");
}

TEST(CSVLogger, MetricsOfAFitMatchWhatTheTrainerLogged) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 2;
  options.log_every_n_steps = 1;
  options.loggers = {"csv:flush_every_n_steps=3"};
  auto model = std::make_shared<RegressionModule>();
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<RegressionData>(24, 8, false, 0, 8));
  const auto rows = read_csv(dir.file("volt_logs/version_0/metrics.csv"));
  // 3 steps per epoch, each logged, plus one validation row per epoch.
  ASSERT_EQ(rows.size(), 8u);
  std::vector<std::string> steps;
  for (const auto& row : rows) steps.push_back(row.at("step") + (row.count("val_loss") ? "v" : ""));
  EXPECT_EQ(steps, (std::vector<std::string>{"1", "2", "3", "3v", "4", "5", "6", "6v"}));
  EXPECT_EQ(rows[4].at("epoch"), "1");
  // The last row holds the final validation loss, as the trainer reports it.
  EXPECT_NEAR(std::stod(rows.back().at("val_loss")), trainer.callback_metrics().at("val_loss"), 1e-6);
  EXPECT_NEAR(std::stod(rows[6].at("train_loss")), trainer.logged_metrics().at("train_loss"), 1e-6);

  // A second fit in the same root gets the next version.
  Trainer second(options);
  second.fit(std::make_shared<RegressionModule>(), std::make_shared<RegressionData>(24, 8));
  EXPECT_TRUE(std::filesystem::exists(dir.file("volt_logs/version_1/metrics.csv")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("volt_logs/version_1/hparams.yaml")));
}

// With --accumulate-grad-batches 3 the step column and --log-every-n-steps count
// optimizer steps, not micro-batches (docs/training_loop.md): 12 batches an epoch are 4 steps;
// every 2nd step is logged, with the loss of the micro-batch that closed its window.
TEST(CSVLogger, UnderAccumulationStepsAndTheLoggingCadenceCountOptimizerSteps) {
  TemporaryDirectory dir;
  Trainer trainer(options_from_args({"--default-root-dir", dir.path(), "--accumulate-grad-batches", "3",
                                     "--log-every-n-steps", "2", "--max-epochs", "2", "--logger", "csv",
                                     "--enable-progress-bar=false", "--enable-model-summary=false",
                                     "--enable-checkpointing=false", "--num-sanity-val-steps", "0"}));
  // Records the loss of every micro-batch that closes a window, by the step it closes.
  struct ClosingLosses : Callback {
    std::map<int64_t, double> by_step;
    int64_t last_step = 0;
    void on_train_batch_end(Trainer& t, Module&, const torch::Tensor& loss, const Batch&, int64_t) override {
      if (t.global_step() != last_step) by_step[last_step = t.global_step()] = loss.item<double>();
    }
  };
  auto closing = std::make_shared<ClosingLosses>();
  trainer.add_callback(closing);
  trainer.fit(std::make_shared<RegressionModule>(), std::make_shared<RegressionData>(48, 4, false, 0, 8));
  ASSERT_EQ(trainer.global_step(), 8);
  const auto rows = read_csv(dir.file("volt_logs/version_0/metrics.csv"));
  std::vector<std::string> steps;
  for (const auto& row : rows) {
    steps.push_back(row.at("step") + "/" + row.at("epoch") + (row.count("val_loss") ? "v" : ""));
    if (!row.count("train_loss")) continue;
    const int64_t step = std::stoll(row.at("step"));
    EXPECT_NEAR(std::stod(row.at("train_loss")), closing->by_step.at(step), 1e-6) << "step " << step;
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"2/0", "4/0", "4/0v", "6/1", "8/1", "8/1v"}));
}

TEST(HparamsYaml, ScalarsAreWrittenSoThatTheirTypeSurvives) {
  EXPECT_EQ(yaml_scalar(true), "true");
  EXPECT_EQ(yaml_scalar(int64_t{-3}), "-3");
  EXPECT_EQ(yaml_scalar(1e-5), "1.0e-05");
  EXPECT_EQ(yaml_scalar(2.0), "2.0");
  EXPECT_EQ(yaml_scalar(0.1), "0.1");
  EXPECT_EQ(yaml_scalar(std::numeric_limits<double>::infinity()), ".inf");
  EXPECT_EQ(yaml_scalar(std::string("adam")), "adam");
  EXPECT_EQ(yaml_scalar(std::string("yes")), "\"yes\"");
  EXPECT_EQ(yaml_scalar(std::string("1e3")), "\"1e3\"");
  EXPECT_EQ(yaml_scalar(std::string("a: b")), "\"a: b\"");
}

TEST(HparamsYaml, PyYamlReadsBackEveryValueAndType) {
  TemporaryDirectory dir;
  const Hyperparameters hparams{{"lr", 1e-5},
                                {"batch_size", int64_t{128}},
                                {"name", std::string("run #1: \"quoted\"\nsecond line")},
                                {"flag", false},
                                {"word", std::string("no")},
                                {"path", std::string("/data/fashion-mnist")},
                                {"ratio", 0.3},
                                {"weird key: x", std::string("")}};
  write_hparams_yaml(dir.file("hparams.yaml"), hparams);
  const std::string script =
      "import yaml, sys\n"
      "d = yaml.safe_load(open(sys.argv[1]))\n"
      "expected = {'lr': 1e-05, 'batch_size': 128, 'name': 'run #1: \"quoted\"\\nsecond line', 'flag': False,\n"
      "            'word': 'no', 'path': '/data/fashion-mnist', 'ratio': 0.3, 'weird key: x': ''}\n"
      "assert d == expected, d\n"
      "assert all(type(d[k]) is type(v) for k, v in expected.items()), {k: type(v) for k, v in d.items()}\n"
      "print('ok')\n";
  std::ofstream(dir.file("check.py")) << script;
  const auto result = run_command("/usr/bin/python3 " + dir.file("check.py") + " " + dir.file("hparams.yaml"));
  EXPECT_EQ(result.exit_code, 0) << result.output << "\n" << file_text(dir.file("hparams.yaml"));
  EXPECT_EQ(result.output, "ok\n");

  write_hparams_yaml(dir.file("empty.yaml"), {});
  EXPECT_EQ(file_text(dir.file("empty.yaml")), "{}\n");
}

}  // namespace
}  // namespace volt::testing
