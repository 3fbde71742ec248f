// TrainerOptions from the command line: Lightning's names in dash form, a program's own flags
// beside volt's, --help with defaults, and clear errors for unknown flags and bad values.
#include <gtest/gtest.h>

#include <boost/program_options.hpp>

#include "trainer/trainer_options.h"

namespace volt {
namespace {

TrainerOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "program");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return TrainerOptions::from_args(static_cast<int>(argv.size()), argv.data());
}

// The ConfigurationError message for `args` (fails the test when none is thrown).
std::string error_for(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const ConfigurationError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigurationError";
  return "";
}

TEST(Options, DefaultsAreLightnings) {
  const auto o = parse({});
  EXPECT_EQ(o.resolved_max_epochs(), 1000);
  EXPECT_EQ(o.max_steps, -1);
  EXPECT_EQ(o.accumulate_grad_batches, 1);
  EXPECT_EQ(o.precision, "32-true");
  EXPECT_EQ(o.strategy, "auto");
  EXPECT_EQ(o.num_sanity_val_steps, 2);
  EXPECT_EQ(o.log_every_n_steps, 50);
  EXPECT_TRUE(o.enable_checkpointing);
  EXPECT_FALSE(o.gradient_clip_val.has_value());
  EXPECT_EQ(o.gradient_clip_algorithm, GradientClipAlgorithm::Norm);
  EXPECT_TRUE(o.malloc_tuning);
}

// Every flag, each set to a value other than its default, reaches its field (issue 21.7: a test
// that passed defaults could not notice a flag that sets nothing).
TEST(Options, FlagsSetEveryField) {
  const TrainerOptions defaults;
  const auto o = parse({"--max-epochs", "3", "--min-epochs", "1", "--max-steps", "100", "--max-time",
                        "00:01:30:00", "--accumulate-grad-batches", "4", "--gradient-clip-val", "0.5",
                        "--gradient-clip-algorithm", "value", "--val-check-interval", "0.25",
                        "--check-val-every-n-epoch", "2", "--limit-train-batches", "10",
                        "--limit-val-batches", "0.5", "--limit-test-batches", "3", "--limit-predict-batches",
                        "7", "--num-sanity-val-steps", "-1", "--log-every-n-steps", "5", "--deterministic",
                        "--seed", "42", "--default-root-dir", "/tmp/x", "--enable-checkpointing=false",
                        "--enable-progress-bar=false", "--enable-model-summary=false", "--accelerator", "cpu",
                        "--devices", "3", "--num-nodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.7",
                        "--master-port", "29123", "--timeout", "12.5", "--cluster-environment", "volt",
                        "--strategy", "ddp", "--precision", "bf16-mixed", "--malloc-tuning=false", "--threads",
                        "3", "--blas-threads", "2", "--ckpt-path",
                        "last", "--logger", "csv", "tensorboard", "--callback", "early_stopping:monitor=val_loss",
                        "--callback", "learning_rate_monitor"});
  EXPECT_EQ(o.resolved_max_epochs(), 3);
  EXPECT_EQ(o.min_epochs, 1);
  EXPECT_EQ(o.max_steps, 100);
  EXPECT_EQ(o.max_time_duration()->count(), 90 * 60);
  EXPECT_EQ(o.accumulate_grad_batches, 4);
  EXPECT_DOUBLE_EQ(*o.gradient_clip_val, 0.5);
  EXPECT_EQ(o.gradient_clip_algorithm, GradientClipAlgorithm::Value);
  EXPECT_TRUE(o.val_check_interval.is_fraction());
  EXPECT_EQ(o.val_check_interval.resolve(100), 25);
  EXPECT_EQ(o.check_val_every_n_epoch, 2);
  EXPECT_FALSE(o.limit_train_batches.is_fraction());
  EXPECT_EQ(o.limit_train_batches.resolve(1000), 10);
  EXPECT_EQ(o.limit_val_batches.resolve(10), 5);
  EXPECT_EQ(o.limit_test_batches.resolve(10), 3);
  EXPECT_EQ(o.limit_predict_batches.resolve(10), 7);
  EXPECT_EQ(o.num_sanity_val_steps, -1);
  EXPECT_EQ(o.log_every_n_steps, 5);
  EXPECT_TRUE(o.deterministic);
  EXPECT_EQ(*o.seed, 42u);
  EXPECT_EQ(o.default_root_dir, "/tmp/x");
  EXPECT_FALSE(o.enable_checkpointing);
  EXPECT_FALSE(o.enable_progress_bar);
  EXPECT_FALSE(o.enable_model_summary);
  EXPECT_EQ(o.accelerator, "cpu");
  EXPECT_EQ(o.devices, 3);
  EXPECT_EQ(o.num_nodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.7");
  EXPECT_EQ(o.master_port, 29123);
  EXPECT_EQ(o.timeout.count(), 12500);
  EXPECT_EQ(o.cluster_environment, "volt");
  EXPECT_EQ(o.strategy, "ddp");
  EXPECT_EQ(o.precision, "bf16-mixed");
  EXPECT_FALSE(o.malloc_tuning);
  EXPECT_EQ(o.threads, 3);
  EXPECT_EQ(o.blas_threads, 2);
  EXPECT_EQ(o.ckpt_path, "last");
  EXPECT_EQ(o.loggers, (std::vector<std::string>{"csv", "tensorboard"}));
  EXPECT_EQ(o.callbacks, (std::vector<std::string>{"early_stopping:monitor=val_loss", "learning_rate_monitor"}));
  // The two that exclude other limits, each on its own.
  EXPECT_EQ(parse({"--fast-dev-run", "2"}).fast_dev_run, 2);
  EXPECT_EQ(parse({"--fast-dev-run"}).fast_dev_run, 1);
  EXPECT_EQ(parse({"--overfit-batches", "3"}).overfit_batches.resolve(100), 3);
  EXPECT_EQ(parse({"--logger", "none"}).loggers, std::vector<std::string>{});
  // Each value above differs from the default, or the check could not fail.
  EXPECT_NE(defaults.devices, o.devices);
  EXPECT_NE(defaults.threads, o.threads);
  EXPECT_NE(defaults.blas_threads, o.blas_threads);
  EXPECT_NE(defaults.node_rank, o.node_rank);
  EXPECT_NE(defaults.master_port, o.master_port);
  EXPECT_NE(defaults.timeout, o.timeout);
  EXPECT_NE(defaults.cluster_environment, o.cluster_environment);
  EXPECT_NE(defaults.precision, o.precision);
  EXPECT_NE(defaults.loggers, o.loggers);
  EXPECT_NE(defaults.limit_predict_batches.resolve(10), 7);
  EXPECT_NE(defaults.fast_dev_run, 2);
  EXPECT_EQ(defaults.overfit_batches.resolve(100), 0);
}

TEST(Options, AnUnknownFlagNamesTheClosestOne) {
  const auto message = error_for({"--max-epoch", "3"});
  EXPECT_NE(message.find("--max-epoch"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean '--max-epochs'"), std::string::npos) << message;
}

TEST(Options, BadValuesNameTheFlagTheValueAndWhatIsAllowed) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expected;  // fragments of the message
  };
  const std::vector<Case> cases{
      {{"--accumulate-grad-batches", "0"}, {"--accumulate-grad-batches", ">= 1", "0"}},
      {{"--gradient-clip-algorithm", "l1"}, {"--gradient-clip-algorithm", "l1", "norm"}},
      {{"--precision", "17-mixed"}, {"17-mixed", "32-true"}},
      {{"--max-time", "1:2"}, {"--max-time", "DD:HH:MM:SS", "1:2"}},
      {{"--limit-train-batches", "1.5"}, {"--limit-train-batches", "1.5"}},
      {{"--limit-val-batches", "-2"}, {"--limit-val-batches", "-2"}},
      {{"--accelerator", "tpu"}, {"--accelerator", "tpu", "cpu"}},
      {{"--devices", "0"}, {"--devices", "0"}},
      {{"--threads", "-1"}, {"--threads", ">= 1", "0: automatic", "-1"}},
      {{"--blas-threads", "-2"}, {"--blas-threads", "-2"}},
      {{"--max-epochs", "2", "--min-epochs", "3"}, {"--min-epochs", "3"}},
      {{"--log-every-n-steps", "0"}, {"--log-every-n-steps"}},
      {{"--max-epochs", "three"}, {"three"}},
  };
  for (const auto& c : cases) {
    const auto message = error_for(c.args);
    for (const auto& fragment : c.expected) {
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "args " << c.args[0] << " " << c.args[1] << ": expected '" << fragment << "' in: " << message;
    }
  }
}

TEST(Options, HelpListsEveryFlagWithItsDefault) {
  try {
    parse({"--help"});
    FAIL() << "expected HelpRequested";
  } catch (const HelpRequested& help) {
    const std::string text = help.what();
    for (const char* flag : {"--max-epochs", "--accumulate-grad-batches", "--precision", "--strategy",
                             "--limit-train-batches", "--deterministic", "--seed", "--devices"}) {
      EXPECT_NE(text.find(flag), std::string::npos) << flag;
    }
    EXPECT_NE(text.find("(=32-true)"), std::string::npos) << text;
  }
}

// Note [Flags from the schema]: each key TrainerOptions::schema() declares is a flag, listed by
// --help and written by --print-config, with no second list to keep in step.
TEST(Options, EveryKeyOfTheSchemaIsAFlagInHelpAndInPrintConfig) {
  std::string help, printed;
  try {
    parse({"--help"});
  } catch (const HelpRequested& h) {
    help = h.what();
  }
  try {
    parse({"--print-config"});
  } catch (const HelpRequested& h) {
    printed = h.what();
  }
  const auto specs = TrainerOptions::schema().specs();
  EXPECT_GE(specs.size(), 40u);
  for (const auto& spec : specs) {
    EXPECT_NE(help.find("--" + spec.key + " "), std::string::npos) << spec.key << " not in --help";
    const bool written = printed.find("\n" + spec.key + " = ") != std::string::npos ||
                         printed.find("\n# " + spec.key + " = (not set") != std::string::npos;
    EXPECT_TRUE(written) << spec.key << " not in --print-config:\n" << printed;
  }
  EXPECT_NE(printed.find("\nlogger = csv\n"), std::string::npos) << printed;      // a repeated key's default
  EXPECT_NE(printed.find("\ncallback = none\n"), std::string::npos) << printed;   // an empty list
}

TEST(Options, RepeatedAndBareFlagsFollowTheSchema) {
  EXPECT_EQ(parse({"--callback", "none"}).callbacks, std::vector<std::string>{});
  EXPECT_TRUE(parse({"--cuda-graph"}).cuda_graph);
  EXPECT_FALSE(parse({"--cuda-graph=false"}).cuda_graph);
  EXPECT_EQ(*parse({"--seed", "18446744073709551615"}).seed, 18446744073709551615ull);  // exact, not via a double
  const auto beside = error_for({"--logger", "csv", "none"});
  EXPECT_NE(beside.find("--logger: 'none' (no value) stands alone"), std::string::npos) << beside;
  const auto negative = error_for({"--seed", "-1"});
  EXPECT_NE(negative.find("--seed expects an integer >= 0, got '-1'"), std::string::npos) << negative;
  const auto timeout = error_for({"--timeout", "0"});
  EXPECT_NE(timeout.find("--timeout expects a value > 0, got '0'"), std::string::npos) << timeout;
}

TEST(Options, AProgramAddsItsOwnFlagsBesideVolts) {
  namespace po = boost::program_options;
  po::options_description own("example");
  own.add_options()("batch-size", po::value<int64_t>()->default_value(64), "samples per batch");
  po::variables_map values;
  const char* argv[] = {"program", "--batch-size", "128", "--max-epochs", "2"};
  const auto o = TrainerOptions::from_args(5, argv, own, &values);
  EXPECT_EQ(values["batch-size"].as<int64_t>(), 128);
  EXPECT_EQ(o.resolved_max_epochs(), 2);
}


}  // namespace
}  // namespace volt
