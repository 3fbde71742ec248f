// Every registered strategy × every precision, through volt's launcher: two ranks with batch 8
// must end where one process with batch 16 ends, after every rank trained on the same model.
// This is the test that catches a strategy wrapping a module before the precision converts it
// (DDP's reducer hooks then sit on gradient accumulators the conversion replaced: "received no
// gradient", or with find_unused_parameters gradients silently never synchronized). New
// strategies join the matrix by being registered; precisions this machine cannot run, and those a
// strategy refuses (SlowMo's buffers in 16 bits), must fail at once with a clear message, not train.
#include <gtest/gtest.h>

#include <cmath>

#include "precision/precision.h"
#include "strategies/strategy_registry.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/regression_problem.h"

namespace volt {
namespace {

struct MatrixCase {
  std::string strategy;   // a registered name, or name:options
  std::string precision;  // a canonical precision name
};

void PrintTo(const MatrixCase& c, std::ostream* out) { *out << c.strategy << " × " << c.precision; }

std::string case_name(const ::testing::TestParamInfo<MatrixCase>& info) {
  std::string name = info.param.strategy + "__" + info.param.precision;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// Every registered strategy (its defaults), plus DDP's options that change how gradients travel.
// Post-local-SGD joins with its default subgroup, one node's processes: both ranks here, so its
// local phase is DDP's again and its averages (of equal models) must change nothing, in every
// precision.
std::vector<MatrixCase> matrix() {
  std::vector<std::string> strategies = strategy_registry().names();
  for (const char* variant : {"ddp:static_graph=true", "ddp:gradient_as_bucket_view=true",
                              "ddp:find_unused_parameters=true,gradient_as_bucket_view=true",
                              "ddp:comm_hook=post_local_sgd,start_local_sgd_iter=2,model_averaging_period=2"}) {
    strategies.push_back(variant);
  }
  std::vector<MatrixCase> cases;
  for (const auto& strategy : strategies) {
    for (const auto& precision : precision_names()) cases.push_back({strategy, precision});
  }
  return cases;
}

bool runs_here(const std::string& precision) {
  try {
    make_precision(precision, torch::kCPU);
    return true;
  } catch (const NotSupportedError&) {
    return false;
  }
}

// Whether `strategy` on `ranks` processes takes `precision` (a strategy's check_precision runs at
// Trainer construction).
bool strategy_accepts(const std::string& strategy, const std::string& precision, int64_t ranks) {
  try {
    testing::construct_quiet_trainer(strategy, ranks, precision);
    return true;
  } catch (const ConfigurationError&) {
    return false;
  }
}

bool runs_two_processes(const std::string& strategy) {
  try {
    return create_strategy(strategy, 2, "test")->is_distributed();
  } catch (const ConfigurationError&) {
    return false;  // single_device: one process
  }
}

// Relative tolerance per precision. Two ranks sum their halves of the batch's gradient in another
// order than one process does; in float32/float64 that differs in the last bits only. bf16-mixed
// computes forward and backward in bfloat16 (8 bits of mantissa) on fp32 weights; bf16-true also
// keeps the weights in bfloat16, where one different rounding of an update is 2^-8 relative;
// 16-true keeps them in float16 (2^-11; it runs on the CPU from LibTorch 2.x on: 1.13 has no
// float16 matrix product there), where 2 ranks ended ~3 such roundings from one process.
double tolerance(const std::string& precision) {
  if (precision == "bf16-mixed") return 2e-3;
  if (precision == "bf16-true") return 1e-2;
  if (precision == "16-true") return 5e-3;
  return 1e-6;
}

class StrategyPrecisionMatrix : public ::testing::TestWithParam<MatrixCase> {};

TEST_P(StrategyPrecisionMatrix, TwoRanksEqualOneProcessOnTheFullBatch) {
  const auto& [strategy, precision] = GetParam();
  const int64_t ranks = runs_two_processes(strategy) ? 2 : 1;
  testing::TemporaryDirectory dir;
  const std::string flags = "--strategy \"" + strategy + "\" --precision " + precision +
                            " --devices " + std::to_string(ranks) + " --batch-size " + std::to_string(16 / ranks);
  const auto result = testing::run_command(testing::train_command(dir.path(), flags), 180);
  const auto lines = testing::trained_lines(result.output);
  if (!runs_here(precision) || !strategy_accepts(strategy, precision, ranks)) {
    EXPECT_NE(result.exit_code, 0) << result.output;
    EXPECT_TRUE(lines.empty()) << "a precision this machine cannot run, or the strategy refuses, trained anyway:\n"
                               << result.output;
    EXPECT_NE(result.output.find("--precision " + precision), std::string::npos) << result.output;
    return;
  }
  ASSERT_EQ(result.exit_code, 0) << result.output;
  ASSERT_EQ(lines.size(), static_cast<size_t>(ranks)) << result.output;
  for (const auto& line : lines) {
    EXPECT_EQ(line.params, lines[0].params) << "rank " << line.rank << " ended with other parameters than rank 0";
  }
  const auto reference = testing::one_process_params("--precision " + precision);
  ASSERT_EQ(reference.size(), lines[0].params.size());
  const double tol = tolerance(precision);
  for (size_t i = 0; i < reference.size(); ++i) {
    EXPECT_LE(std::abs(lines[0].params[i] - reference[i]), tol * std::max(1.0, std::abs(reference[i])))
        << strategy << " × " << precision << ", parameter " << i << ": " << lines[0].params[i]
        << " on " << ranks << " rank(s), " << reference[i] << " on one process";
  }
}

INSTANTIATE_TEST_SUITE_P(Registered, StrategyPrecisionMatrix, ::testing::ValuesIn(matrix()), case_name);

}  // namespace
}  // namespace volt
