// Every registered strategy × every precision, through volt's launcher: two ranks with batch 8
// must end where one process with batch 16 ends, after every rank trained on the same model.
// This is the test that catches a strategy wrapping a module before the precision converts it
// (DDP's reducer hooks then sit on gradient accumulators the conversion replaced: "received no
// gradient", or with find_unused_parameters gradients silently never synchronized). New
// strategies join the matrix by being registered; precisions this machine cannot run, and those a
// strategy refuses (SlowMo's buffers in 16 bits), must fail at once with a clear message, not train.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

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
  std::vector<std::string> strategies;
  for (const auto& name : strategy_registry().names()) {
    // tensor_parallel needs a plan: the MLP's two body linears, column- then row-wise.
    strategies.push_back(name == "tensor_parallel" ? "tensor_parallel:plan=body.0:colwise|body.2:rowwise" : name);
  }
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

// One process's parameters under `precision` (and `model_flags`), computed once per pair for the
// whole suite (the suite runs in one test program): every strategy's case compares with the same run.
const std::vector<double>& one_process_reference(const std::string& precision, const std::string& model_flags) {
  static std::map<std::string, std::vector<double>> computed;
  const auto key = precision + model_flags;
  auto found = computed.find(key);
  if (found == computed.end())
    found = computed.emplace(key, testing::one_process_params("--precision " + precision + model_flags)).first;
  return found->second;
}

// The ranks of a pipeline or a tensor-parallel group are one replica, which takes the whole batch:
// they train the MLP (the linear model is one layer, which no two stages share and no plan splits
// in two), the pipeline without validation (it runs training steps only).
bool is_pipeline(const std::string& strategy) { return strategy.rfind("pipeline", 0) == 0; }
bool splits_the_model(const std::string& strategy) {
  return is_pipeline(strategy) || strategy.rfind("tensor_parallel", 0) == 0;
}
std::string model_flags(const std::string& strategy) { return splits_the_model(strategy) ? " --model mlp" : ""; }

class StrategyPrecisionMatrix : public ::testing::TestWithParam<MatrixCase> {};

TEST_P(StrategyPrecisionMatrix, TwoRanksEqualOneProcessOnTheFullBatch) {
  const auto& [strategy, precision] = GetParam();
  const int64_t ranks = runs_two_processes(strategy) ? 2 : 1;
  testing::TemporaryDirectory dir;
  const int64_t batch = splits_the_model(strategy) ? 16 : 16 / ranks;
  const std::string flags = "--strategy \"" + strategy + "\" --precision " + precision + " --devices " +
                            std::to_string(ranks) + " --batch-size " + std::to_string(batch) + model_flags(strategy) +
                            (is_pipeline(strategy) ? " --limit-val-batches 0" : "");
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
  const auto& reference = one_process_reference(precision, model_flags(strategy));
  ASSERT_EQ(reference.size(), lines[0].params.size());
  const double tol = tolerance(precision);
  for (size_t i = 0; i < reference.size(); ++i) {
    EXPECT_LE(std::abs(lines[0].params[i] - reference[i]), tol * std::max(1.0, std::abs(reference[i])))
        << strategy << " × " << precision << ", parameter " << i << ": " << lines[0].params[i]
        << " on " << ranks << " rank(s), " << reference[i] << " on one process";
  }
}

INSTANTIATE_TEST_SUITE_P(Registered, StrategyPrecisionMatrix, ::testing::ValuesIn(matrix()), case_name);

// Issue 34.5: the strategies whose own path leaves the one-process oracle behind (the ranks train
// apart, or the gradients are approximated) run it here in every precision: post-local-SGD past
// its switch with subgroups of one rank, SlowMo through slow momentum steps, PowerSGD compressing
// (the MLP's 4x8 weight: the linear model has no matrix PowerSGD would compress). Their oracle is
// the same strategy in 32-true, every rank, within the precision's tolerance; a precision the
// strategy refuses must fail at once, as above.
std::vector<MatrixCase> own_path_matrix() {
  std::vector<MatrixCase> cases;
  for (const char* strategy :
       {"ddp:comm_hook=post_local_sgd,start_local_sgd_iter=2,subgroup_size=1,model_averaging_period=3",
        "slowmo:localsgd_frequency=2,slowmo_frequency=4,nprocs_per_node=1",
        "ddp:comm_hook=powersgd,start_powersgd_iter=2,matrix_approximation_rank=1"}) {
    for (const auto& precision : precision_names()) {
      if (precision != "32-true") cases.push_back({strategy, precision});
    }
  }
  return cases;
}

std::string own_path_flags(const std::string& strategy, const std::string& precision) {
  return "--strategy \"" + strategy + "\" --precision " + precision + " --devices 2 --batch-size 8 --model mlp";
}

// The strategy's own run in 32-true, once per strategy for the whole suite.
const std::vector<testing::Trained>& thirty_two_bit_run(const std::string& strategy) {
  static std::map<std::string, std::vector<testing::Trained>> computed;
  auto found = computed.find(strategy);
  if (found == computed.end()) {
    testing::TemporaryDirectory dir;
    found = computed
                .emplace(strategy, testing::trained_lines(
                                       testing::run_command(
                                           testing::train_command(dir.path(), own_path_flags(strategy, "32-true")), 180)
                                           .output))
                .first;
  }
  return found->second;
}

class OwnPathPrecisionMatrix : public ::testing::TestWithParam<MatrixCase> {};

TEST_P(OwnPathPrecisionMatrix, EveryRankEndsWhereThe32BitRunOfTheSameStrategyEnds) {
  const auto& [strategy, precision] = GetParam();
  testing::TemporaryDirectory dir;
  const auto result = testing::run_command(testing::train_command(dir.path(), own_path_flags(strategy, precision)), 180);
  const auto lines = testing::trained_lines(result.output);
  if (!runs_here(precision) || !strategy_accepts(strategy, precision, 2)) {
    EXPECT_NE(result.exit_code, 0) << result.output;
    EXPECT_TRUE(lines.empty()) << "a precision this machine cannot run, or the strategy refuses, trained anyway:\n"
                               << result.output;
    return;
  }
  ASSERT_EQ(result.exit_code, 0) << result.output;
  ASSERT_EQ(lines.size(), 2u) << result.output;
  const auto& reference = thirty_two_bit_run(strategy);
  ASSERT_EQ(reference.size(), 2u) << strategy << " in 32-true did not train";
  const double tol = tolerance(precision);
  for (size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(lines[r].params.size(), reference[r].params.size());
    for (size_t i = 0; i < reference[r].params.size(); ++i) {
      const double want = reference[r].params[i];
      EXPECT_LE(std::abs(lines[r].params[i] - want), tol * std::max(1.0, std::abs(want)))
          << strategy << " × " << precision << ", rank " << r << ", parameter " << i << ": " << lines[r].params[i]
          << " vs " << want << " in 32-true";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OwnPath, OwnPathPrecisionMatrix, ::testing::ValuesIn(own_path_matrix()), case_name);

}  // namespace
}  // namespace volt
