// The main of every test program: GoogleTest's, except that a run in which every selected test
// was skipped (the CUDA tests on a machine without a GPU) exits with 77, which CTest reports as
// "Skipped" (SKIP_RETURN_CODE, cmake/volt_test_suites_list.cmake) instead of "Passed".
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  const auto& unit = *::testing::UnitTest::GetInstance();
  const bool all_skipped = unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count();
  return status == 0 && all_skipped ? 77 : status;
}
