// The example program's answer to a precision this machine cannot run, and to an unknown one.
#include <gtest/gtest.h>

#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

TEST(ExamplePrecision, Float16MixedOnACpuExitsWithAdvice) {
  const auto result = run_command(built_binary("examples/fashion_mnist") + " --precision 16-mixed --accelerator cpu 2>&1", 300);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("use --precision bf16-mixed"), std::string::npos) << result.output;
}

TEST(ExamplePrecision, AnUnknownPrecisionIsAUsageError) {
  const auto result = run_command(built_binary("examples/fashion_mnist") + " --precision bf17-mixed 2>&1", 300);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("did you mean 'bf16-mixed'"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace volt::testing
