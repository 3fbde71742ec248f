// Issue 34.5: the metrics DDP logs for its comm hook (DDPStrategy::metrics), read back from the
// CSV logger of a run through the Trainer on two processes, against the closed form of what each
// hook sends: "comm_hook/step_bytes" (the bytes the hook's collectives carried in the step's
// synchronized backward, from the communicator's counters) and "comm_hook/compression_ratio" (those
// bytes over the buckets' float32 bytes).
#include <gtest/gtest.h>

#include <cmath>

#include "tests/distributed/worker_runs.h"

namespace volt::testing {
namespace {

struct HookRow {
  int64_t step;
  double bytes, ratio;
};

// The metrics.csv rows that carry the hook's metrics, in step order.
std::vector<HookRow> hook_rows(const std::string& strategy, const std::string& model) {
  TemporaryDirectory dir;
  const auto result = run_command(
      train_command(dir.path(), "--strategy \"" + strategy + "\" --devices 2 --batch-size 8 --model " + model +
                                    " --logger csv"),
      180);
  EXPECT_EQ(result.exit_code, 0) << strategy << ":\n" << result.output;
  const auto lines = trained_lines(result.output);
  if (lines.empty()) return {};
  std::vector<HookRow> rows;
  for (const auto& row : read_csv(lines[0].log_dir + "/metrics.csv")) {
    if (!row.count("comm_hook/step_bytes") || row.at("comm_hook/step_bytes").empty()) continue;
    rows.push_back({std::stoll(row.at("step")), std::stod(row.at("comm_hook/step_bytes")),
                    std::stod(row.at("comm_hook/compression_ratio"))});
  }
  return rows;
}

void expect_every_row(const std::vector<HookRow>& rows, double bytes, double ratio, const std::string& what) {
  ASSERT_FALSE(rows.empty()) << what << ": no row carries the hook's metrics";
  for (const auto& row : rows) {
    EXPECT_EQ(row.bytes, bytes) << what << ", step " << row.step;
    EXPECT_NEAR(row.ratio, ratio, 1e-8) << what << ", step " << row.step;  // the CSV's 9 digits
  }
}

TEST(CommHookMetrics, StepBytesAndCompressionRatioAreWhatEachHookSends) {
  // The linear model's gradients: 8 + 1 float32 = 36 bytes in one bucket.
  expect_every_row(hook_rows("ddp", "linear"), 36, 1.0, "allreduce");
  expect_every_row(hook_rows("ddp:comm_hook=fp16_compress", "linear"), 18, 0.5, "fp16_compress");
  // The MLP (61 float32 = 244 bytes): plain all-reduce for the first 2 iterations, then PowerSGD
  // at rank 1 compresses body.0.weight (4x8: P 4 + Q 8 floats; the others are too small to gain
  // 2x) and all-reduces the 61 - 32 = 29 other elements as they are: (4 + 8 + 29) x 4 = 164 bytes.
  const auto powersgd =
      hook_rows("ddp:comm_hook=powersgd,start_powersgd_iter=2,matrix_approximation_rank=1", "mlp");
  ASSERT_GE(powersgd.size(), 4u);
  std::vector<HookRow> before, after;
  for (const auto& row : powersgd) (row.step <= 2 ? before : after).push_back(row);
  expect_every_row(before, 244, 1.0, "powersgd before start_powersgd_iter");
  expect_every_row(after, 164, 164.0 / 244.0, "powersgd after start_powersgd_iter");
}

}  // namespace
}  // namespace volt::testing
