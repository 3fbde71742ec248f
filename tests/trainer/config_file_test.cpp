// --config FILE sets any flag, the command line wins over it, and --print-config writes the
// effective configuration in a form --config reads back to the same configuration.
#include <gtest/gtest.h>

#include <boost/program_options.hpp>

#include <fstream>

#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// What --print-config prints for `args` (a test failure and "" when it prints nothing).
std::string printed_config(std::vector<std::string> args) {
  args.push_back("--print-config");
  try {
    options_from_args(args);
  } catch (const HelpRequested& printed) {
    return printed.what();
  }
  ADD_FAILURE() << "--print-config returned instead of printing";
  return "";
}

const char* const kConfig =
    "# a run of the regression job\n"
    "max-epochs = 3\n"
    "strategy = ddp:static_graph=true\n"
    "limit-train-batches = 0.25\n"
    "gradient-clip-val = 0.5\n"
    "deterministic = true\n"
    "logger = csv\n"
    "logger = tensorboard\n"
    "seed = 7\n";

TEST(ConfigFile, SetsTrainerFlags) {
  TemporaryDirectory dir;
  write_file(dir.file("run.ini"), kConfig);
  const auto options = options_from_args({"--config", dir.file("run.ini")});
  EXPECT_EQ(options.max_epochs, 3);
  EXPECT_EQ(options.strategy, "ddp:static_graph=true");
  EXPECT_EQ(options.limit_train_batches.to_string(), "0.25");
  EXPECT_EQ(options.gradient_clip_val, 0.5);
  EXPECT_TRUE(options.deterministic);
  EXPECT_EQ(options.loggers, (std::vector<std::string>{"csv", "tensorboard"}));
  EXPECT_EQ(options.seed, 7u);
  EXPECT_EQ(options.devices, 1);  // not in the file: the default
}

TEST(ConfigFile, CommandLineWins) {
  TemporaryDirectory dir;
  write_file(dir.file("run.ini"), kConfig);
  const auto options = options_from_args({"--max-epochs", "5", "--config", dir.file("run.ini"), "--logger", "none"});
  EXPECT_EQ(options.max_epochs, 5);
  EXPECT_TRUE(options.loggers.empty());                // the command line's --logger none, not the file's two
  EXPECT_EQ(options.strategy, "ddp:static_graph=true");  // the rest still from the file
  EXPECT_EQ(options.seed, 7u);
}

TEST(ConfigFile, PrintConfigRoundTrips) {
  TemporaryDirectory dir;
  write_file(dir.file("run.ini"), kConfig);
  const auto printed = printed_config({"--config", dir.file("run.ini"), "--max-epochs", "5", "--timeout", "12.5"});
  EXPECT_NE(printed.find("\nmax-epochs = 5\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("\nstrategy = ddp:static_graph=true\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("\nlogger = csv\nlogger = tensorboard\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("\ntimeout = 12.5\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("\ndevices = 1\n"), std::string::npos) << printed;  // defaults are written too
  EXPECT_EQ(printed.find("print-config ="), std::string::npos) << printed;  // command-line flags are not

  write_file(dir.file("printed.ini"), printed);
  EXPECT_EQ(printed_config({"--config", dir.file("printed.ini")}), printed);
  const auto options = options_from_args({"--config", dir.file("printed.ini")});
  EXPECT_EQ(options.max_epochs, 5);
  EXPECT_EQ(options.timeout, std::chrono::milliseconds(12500));
  EXPECT_EQ(options.gradient_clip_val, 0.5);
  EXPECT_EQ(options.loggers, (std::vector<std::string>{"csv", "tensorboard"}));
}

TEST(ConfigFile, UnsetOptionsArePrintedAsCommentsAndStayUnset) {
  TemporaryDirectory dir;
  const auto printed = printed_config({});
  EXPECT_NE(printed.find("\n# max-epochs = (not set"), std::string::npos) << printed;
  write_file(dir.file("printed.ini"), printed);
  const auto options = options_from_args({"--config", dir.file("printed.ini")});
  EXPECT_FALSE(options.max_epochs.has_value());
  EXPECT_FALSE(options.seed.has_value());
}

TEST(ConfigFile, ProgramFlagsComeFromTheFileToo) {
  TemporaryDirectory dir;
  write_file(dir.file("run.ini"), "lr = 0.003\nmax-steps = 4\n");
  double lr = 0.1;
  boost::program_options::options_description program("program");
  program.add_options()("lr", boost::program_options::value(&lr)->default_value(lr), "learning rate");
  boost::program_options::variables_map values;
  const std::string config = dir.file("run.ini");
  const char* argv[] = {"program", "--config", config.c_str()};
  const auto options = TrainerOptions::from_args(3, argv, program, &values);
  EXPECT_EQ(lr, 0.003);
  EXPECT_EQ(options.max_steps, 4);
}

TEST(ConfigFile, UnknownNameNamesTheFileAndTheClosestFlag) {
  TemporaryDirectory dir;
  write_file(dir.file("run.ini"), "max-epoch = 3\n");
  const auto message = configuration_error_of([&] { options_from_args({"--config", dir.file("run.ini")}); });
  EXPECT_NE(message.find(dir.file("run.ini")), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'max-epochs'"), std::string::npos) << message;
}

TEST(ConfigFile, CommandLineOnlyFlagsAreNotConfigOptions) {
  TemporaryDirectory dir;
  write_file(dir.file("run.ini"), "help = true\n");
  const auto message = configuration_error_of([&] { options_from_args({"--config", dir.file("run.ini")}); });
  EXPECT_NE(message.find("unknown option 'help'"), std::string::npos) << message;
}

TEST(ConfigFile, BadValueAndMissingFileAreErrors) {
  TemporaryDirectory dir;
  write_file(dir.file("run.ini"), "max-epochs = three\n");
  auto message = configuration_error_of([&] { options_from_args({"--config", dir.file("run.ini")}); });
  EXPECT_NE(message.find("--config " + dir.file("run.ini")), std::string::npos) << message;
  message = configuration_error_of([&] { options_from_args({"--config", dir.file("missing.ini")}); });
  EXPECT_NE(message.find("cannot read"), std::string::npos) << message;
}

// What the command line sets, the file's value for it is not read at all.
TEST(ConfigFile, AFileValueTheCommandLineOverridesIsNotChecked) {
  TemporaryDirectory dir;
  write_file(dir.file("run.ini"), "max-epochs = three\nmax-steps = 4\n");
  const auto options = options_from_args({"--config", dir.file("run.ini"), "--max-epochs", "2"});
  EXPECT_EQ(options.max_epochs, 2);
  EXPECT_EQ(options.max_steps, 4);
}

TEST(ConfigFile, InvalidValuesFromTheFileAreCaughtLikeFlags) {
  TemporaryDirectory dir;
  write_file(dir.file("run.ini"), "accumulate-grad-batches = 0\n");
  EXPECT_FALSE(configuration_error_of([&] { options_from_args({"--config", dir.file("run.ini")}); }).empty());
}

}  // namespace
}  // namespace volt::testing
