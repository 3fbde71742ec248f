// README.md's example is a program that compiles and trains as written: tests/docs/readme_example.cpp
// holds its code block character for character (compared here with the README), and runs on one
// process and, by name, with DDP on two.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

TEST(ReadmeExample, IsTheReadmesCodeAndTrainsAsWritten) {
  const std::string readme = file_text(std::string(VOLT_SOURCE_DIR) + "/README.md");
  const std::string opening = "## An example\n\n```cpp\n";
  const auto begin = readme.find(opening);
  ASSERT_NE(begin, std::string::npos) << "README.md has no example";
  const auto code = begin + opening.size();
  const std::string block = readme.substr(code, readme.find("```", code) - code);
  EXPECT_EQ(file_text(std::string(VOLT_SOURCE_DIR) + "/tests/docs/readme_example.cpp"), block)
      << "tests/docs/readme_example.cpp must be README.md's example as written";
  for (const std::string devices : {"", " --strategy ddp --devices 2"}) {
    TemporaryDirectory dir;
    const auto run = run_command(built_binary("tests/readme_example") + " --max-epochs 1 --enable-progress-bar false" +
                                     " --logger csv --default-root-dir " + dir.path() + devices + " 2>&1",
                                 180);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto rows = read_csv(dir.file("volt_logs/version_0/metrics.csv"));
    bool validated = false;
    for (const auto& row : rows) validated = validated || row.count("val_acc");
    EXPECT_TRUE(validated) << "the example's validation_step logged val_acc" << devices;
  }
}

}  // namespace
}  // namespace volt::testing
