// Post-local-SGD and SlowMo through the Trainer and volt's launcher (the distributed_worker's
// regression fit, Adam so that every rank has optimizer state of its own): a run interrupted in the
// local phase (ranks then hold different models and optimizer states; SlowMo also its slow momentum
// buffers, sharded or whole) and resumed from its checkpoint ends every rank bitwise where the
// uninterrupted run ends, on 2 and 4 ranks; and the logged bytes show post-local-SGD's world
// carrying 1/period of DDP's per step after the switch, the subgroup the gradients, and SlowMo's
// leaders carrying the models only at the averaging steps.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt::local_sgd_training_tests {
namespace {

using testing::run_command;
using testing::trained_lines;

std::string worker_command(const std::string& root, const std::string& extra) {
  return testing::adam_train_command(root, extra);
}

std::string find_file(const std::string& root, const std::string& name) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (entry.path().filename() == name) return entry.path().string();
  }
  return "";
}

struct ResumeCase {
  std::string name;
  int64_t ranks;
  std::string strategy;
};

class LocalModelResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(LocalModelResume, ARunInterruptedInTheLocalPhaseEndsBitwiseLikeTheUninterruptedOne) {
  const auto& [name, ranks, strategy] = GetParam();
  // 64 samples, batch 2 per rank: 32 / ranks steps per epoch; the checkpoint after epoch 1 falls
  // on a local step that does not average, so ranks differ there (checked below).
  const std::string flags = "--strategy \"" + strategy + "\" --devices " + std::to_string(ranks) + " --batch-size 2";
  testing::TemporaryDirectory whole, part;
  auto uninterrupted = run_command(worker_command(whole.path(), flags + " --max-epochs 3"), 240);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  auto first = run_command(worker_command(part.path(), flags + " --max-epochs 1 --checkpoint-every-epoch"), 240);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto at_checkpoint = trained_lines(first.output);
  ASSERT_EQ(at_checkpoint.size(), static_cast<size_t>(ranks)) << first.output;
  EXPECT_NE(at_checkpoint.front().params, at_checkpoint.back().params)
      << "the checkpoint must fall where the ranks' models differ, or this test proves nothing";
  const std::string checkpoint = find_file(part.path(), "last.ckpt");
  ASSERT_FALSE(checkpoint.empty()) << first.output;
  auto resumed = run_command(worker_command(part.path(), flags + " --max-epochs 3 --ckpt-path " + checkpoint), 240);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;

  const auto expected = trained_lines(uninterrupted.output);
  const auto got = trained_lines(resumed.output);
  ASSERT_EQ(expected.size(), static_cast<size_t>(ranks)) << uninterrupted.output;
  ASSERT_EQ(got.size(), static_cast<size_t>(ranks)) << resumed.output;
  for (int64_t r = 0; r < ranks; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(r)].params, expected[static_cast<size_t>(r)].params)
        << "rank " << r << " of " << ranks << " after the resume";
  }
}

const std::string kPostLocalSGD = "ddp:comm_hook=post_local_sgd,start_local_sgd_iter=3,";

INSTANTIATE_TEST_SUITE_P(
    Ranks, LocalModelResume,
    ::testing::Values(
        ResumeCase{"post_local_sgd_2_ranks_periodic", 2, kPostLocalSGD + "subgroup_size=1,model_averaging_period=5"},
        ResumeCase{"post_local_sgd_4_ranks_periodic", 4, kPostLocalSGD + "subgroup_size=2,model_averaging_period=6"},
        ResumeCase{"post_local_sgd_4_ranks_hierarchical", 4,
                   kPostLocalSGD + "subgroup_size=1,model_averaging_periods=2:2,4:4"},
        // Epoch 1 ends after 16 (2 ranks) or 8 (4 ranks) steps: after a slow momentum step at 6 or
        // 12, before the next average.
        ResumeCase{"slowmo_2_ranks_sharded", 2, "slowmo:nprocs_per_node=1,localsgd_frequency=3,slowmo_frequency=6"},
        ResumeCase{"slowmo_4_ranks_sharded", 4, "slowmo:nprocs_per_node=2,localsgd_frequency=3,slowmo_frequency=6"},
        ResumeCase{"slowmo_4_ranks_whole", 4,
                   "slowmo:nprocs_per_node=1,localsgd_frequency=3,slowmo_frequency=6,memory_efficient=false"}),
    [](const ::testing::TestParamInfo<ResumeCase>& info) { return info.param.name; });

// metrics.csv rows that carry comm/step_bytes, by their "step" column.
std::map<int64_t, std::map<std::string, std::string>> byte_rows(const std::string& log_dir) {
  std::map<int64_t, std::map<std::string, std::string>> rows;
  for (const auto& row : testing::read_csv(log_dir + "/metrics.csv")) {
    if (row.count("comm/step_bytes")) rows[std::stoll(row.at("step"))] = row;
  }
  return rows;
}

TEST(PostLocalSGDBytes, AfterTheSwitchTheWorldCarriesOnePeriodOfDDPsBytes) {
  testing::TemporaryDirectory ddp_dir, local_dir;
  const std::string common = " --devices 4 --batch-size 2 --max-epochs 2";
  auto ddp = run_command(worker_command(ddp_dir.path(), "--strategy ddp" + common), 240);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  auto local = run_command(
      worker_command(local_dir.path(), "--strategy \"ddp:comm_hook=post_local_sgd,start_local_sgd_iter=3,"
                                       "model_averaging_period=4,subgroup_size=2\"" + common),
      240);
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const auto ddp_rows = byte_rows(trained_lines(ddp.output).at(0).log_dir);
  const auto local_rows = byte_rows(trained_lines(local.output).at(0).log_dir);
  ASSERT_EQ(ddp_rows.size(), 16u);  // 2 epochs × 64 / (4 × 2) steps
  ASSERT_EQ(local_rows.size(), 16u);
  constexpr double kGradientBytes = 9 * 4;  // the regression's 8 weights and bias, float32
  int64_t compared = 0;
  double ddp_sum = 0, local_sum = 0;
  for (const auto& [step, row] : ddp_rows) {
    // The averager's step index is the logged global step - 1 (logged after the step).
    const int64_t index = step - 1;
    if (index < 3 || index >= 15) continue;  // the local phase's first three periods
    const double ddp_bytes = std::stod(row.at("comm/step_bytes"));
    const double local_bytes = std::stod(local_rows.at(step).at("comm/step_bytes"));
    const bool averages = (index - 3) % 4 == 0;
    // Whatever else the step sends (synced metrics, decisions) is the same in both runs.
    EXPECT_EQ(local_bytes, ddp_bytes - kGradientBytes + (averages ? kGradientBytes : 0)) << "step " << step;
    EXPECT_EQ(std::stod(local_rows.at(step).at("comm/node/step_bytes")), kGradientBytes)
        << "step " << step << ": the gradients within the subgroup";
    ddp_sum += ddp_bytes - (ddp_bytes - kGradientBytes);
    local_sum += local_bytes - (ddp_bytes - kGradientBytes);
    ++compared;
  }
  ASSERT_EQ(compared, 12);  // steps 4..15 of the log: local-phase indices 3..14, three periods
  EXPECT_EQ(local_sum * 4, ddp_sum) << "gradient/parameter bytes over the world: 1/period of DDP's";
}

TEST(SlowMoBytes, WithinTheNodeEveryStepAcrossNodesOnlyAtTheAveragingSteps) {
  testing::TemporaryDirectory dir;
  auto run = run_command(worker_command(dir.path(), "--strategy \"slowmo:nprocs_per_node=2,localsgd_frequency=3,"
                                                    "slowmo_frequency=6\" --devices 4 --batch-size 2 --max-epochs 2"),
                         240);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto rows = byte_rows(trained_lines(run.output).at(0).log_dir);  // rank 0: a node leader
  ASSERT_EQ(rows.size(), 16u);
  constexpr double kModelBytes = 9 * 4;  // the regression's 8 weights and bias, float32
  for (const auto& [step, row] : rows) {
    const bool averages = step % 3 == 0;  // logged after optimizer step `step`
    if (step > 2) {  // the first two also rebuild the reducer's buckets
      EXPECT_EQ(std::stod(row.at("comm/node/step_bytes")), kModelBytes * (averages ? 2 : 1))
          << "step " << step << ": the gradients, and the leader's broadcast of an average";
    }
    EXPECT_EQ(std::stod(row.at("comm/leaders/step_bytes")), averages ? kModelBytes : 0) << "step " << step;
    EXPECT_EQ(std::stod(row.at("slowmo/buffer_bytes")), 2 * 3 * 4) << "step " << step << ": ceil(9 / 4) = 3 "
                                                                      "elements of x_old and u on rank 0";
  }
}

// bucket_cap_mb reaches SlowMo's reducer within the node: about one byte puts the regression's
// bias (4 bytes) and weight (32) in buckets of their own (a bucket closes once it reaches the cap,
// as in PyTorch's assignment), two all-reduces a step where the default makes one, the same bytes
// and the same training.
TEST(SlowMoBytes, BucketCapMbSplitsTheNodesGradientReduction) {
  auto node_calls_per_step = [](const std::string& options, std::vector<double>& params) {
    testing::TemporaryDirectory dir;
    auto run = run_command(worker_command(dir.path(), "--strategy \"slowmo:nprocs_per_node=2,localsgd_frequency=3," +
                                                          options + "\" --devices 4 --batch-size 2 --max-epochs 1"),
                           240);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    const auto trained = trained_lines(run.output);
    if (trained.empty()) return std::map<int64_t, double>{};
    params = trained.at(0).params;
    const auto rows = byte_rows(trained.at(0).log_dir);
    std::map<int64_t, double> calls;  // node-group calls of steps that do not average
    for (const auto& [step, row] : rows) {
      if (step > 3 && step % 3 != 0 && rows.count(step - 1)) {
        calls[step] = std::stod(row.at("comm/node/calls")) - std::stod(rows.at(step - 1).at("comm/node/calls"));
        EXPECT_EQ(std::stod(row.at("comm/node/step_bytes")), 9 * 4) << options << ", step " << step;
      }
    }
    return calls;
  };
  std::vector<double> default_params, split_params;
  const auto whole = node_calls_per_step("slowmo_frequency=6", default_params);
  const auto split = node_calls_per_step("slowmo_frequency=6,bucket_cap_mb=0.000001", split_params);
  ASSERT_FALSE(whole.empty());
  ASSERT_EQ(whole.size(), split.size());
  for (const auto& [step, calls] : whole) {
    EXPECT_EQ(calls, 1) << "default bucket cap, step " << step;
    EXPECT_EQ(split.at(step), 2) << "bucket_cap_mb=0.000001, step " << step;
  }
  EXPECT_EQ(split_params, default_params) << "the buckets change the calls, not the sums";
}

// Without nprocs_per_node the nodes are the cluster's: volt's launcher puts both processes on one
// node, so SlowMo warns that local SGD is off, and without slow momentum it is DDP, bitwise.
TEST(SlowMoNodes, OneNodeFromTheClusterWarnsAndWithoutSlowMomentumIsDDP) {
  testing::TemporaryDirectory ddp_dir, slowmo_dir;
  const std::string common = " --devices 2 --batch-size 2 --max-epochs 2";
  auto ddp = run_command(worker_command(ddp_dir.path(), "--strategy ddp" + common), 240);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  auto slowmo = run_command(worker_command(slowmo_dir.path(), "--strategy slowmo:slowmo_momentum=0" + common), 240);
  ASSERT_EQ(slowmo.exit_code, 0) << slowmo.output;
  EXPECT_NE(slowmo.output.find("all 2 processes are on one node (2 per node), so gradients are averaged over all of "
                               "them every step and local SGD is off"),
            std::string::npos)
      << slowmo.output;
  const auto expected = trained_lines(ddp.output), got = trained_lines(slowmo.output);
  ASSERT_EQ(got.size(), 2u) << slowmo.output;
  ASSERT_EQ(expected.size(), 2u) << ddp.output;
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(got[r].params, expected[r].params) << "rank " << r;
}

}  // namespace
}  // namespace volt::local_sgd_training_tests
