// The Trainer over several processes, end to end: a gradient-averaging ParallelStrategy on two
// ranks must train exactly like one process with twice the batch (the DistributedSampler splits
// each global batch between the ranks); sync_dist gives the mean over ranks; evaluation counts each
// sample once; only rank 0 writes logs, into one version directory that every rank agrees on;
// communication bytes are logged. Launched by volt's launcher and by torchrun.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <regex>

#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"
#include "distributed/network.h"

namespace volt {
namespace {

using testing::run_command;
using testing::torchrun;
using testing::train_command;
using testing::trained_lines;

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tolerance, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tolerance) << what << ", parameter " << i;
}

class DistributedTrainingTest : public ::testing::Test {
 protected:
  static std::vector<double> reference_params() { return testing::one_process_params(); }
};

TEST_F(DistributedTrainingTest, LauncherRunEqualsOneProcessWithTheGlobalBatch) {
  testing::TemporaryDirectory dir;
  const auto result = run_command(train_command(dir.path(), "--batch-size 8 --strategy test_grad_avg --devices 2"), 180);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto lines = trained_lines(result.output);
  ASSERT_EQ(lines.size(), 2u) << result.output;
  EXPECT_EQ(lines[0].params, lines[1].params) << "ranks ended with different parameters";
  expect_close(lines[0].params, reference_params(), 1e-5, "2 ranks × batch 8 vs 1 process × batch 16");

  // Validation: 13 samples split 7/6 without padding, summed over ranks: each counted once.
  EXPECT_EQ(lines[0].val_samples, 13.0);
  EXPECT_EQ(lines[1].val_samples, 13.0);
  EXPECT_EQ(lines[0].env, "volt");

  // One log directory, chosen by rank 0, the same on both ranks; only rank 0 wrote into it.
  EXPECT_EQ(lines[0].log_dir, lines[1].log_dir);
  EXPECT_EQ(lines[0].log_dir, dir.path() + "/volt_logs/version_0");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/volt_logs/version_1"));
  const auto rows = testing::read_csv(lines[0].log_dir + "/metrics.csv");
  int64_t synced_rows = 0, step_rows_68 = 0;
  double last_bytes = 0;
  for (const auto& row : rows) {
    if (row.count("rank_plus_one")) {
      ++synced_rows;
      EXPECT_EQ(std::stod(row.at("rank_plus_one")), 1.5) << "sync_dist must give the mean of 1 and 2";
      EXPECT_EQ(std::stod(row.at("rank_plus_one_local")), 1.0) << "without sync_dist rank 0 logs its own";
    }
    if (row.count("comm/bytes")) {
      const double bytes = std::stod(row.at("comm/bytes"));
      EXPECT_GE(bytes, last_bytes);
      last_bytes = bytes;
      // Within an epoch a step moves: the gradients (8 + 1 float32 = 36 bytes), the synced
      // rank_plus_one (one float64, 8) and rank 0's stop decision with its site (three int64, 24).
      if (std::stod(row.at("comm/step_bytes")) == 68.0) ++step_rows_68;
    }
  }
  EXPECT_EQ(synced_rows, 8);  // 2 epochs × 4 steps
  EXPECT_GE(step_rows_68, 6) << "steps 2-4 of each epoch";
  EXPECT_GT(last_bytes, 8 * 36.0);
}

TEST_F(DistributedTrainingTest, RanksAtDifferentDecisionsFailAtOnceNamingWhere) {
  // Rank 1 alone takes a decision after its first batch (a collective behind a rank-local
  // condition). Without the decision's site it would take rank 0's next stop decision as its
  // answer and run on one collective out of step (Note [Which decision]).
  testing::TemporaryDirectory dir;
  const auto start = std::chrono::steady_clock::now();
  const auto result = run_command(
      train_command(dir.path(), "--batch-size 8 --devices 2 --strategy ddp --stray-decision-rank 1"), 180);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("ranks out of step: global rank 1 of 2 took a broadcast_decision at "
                               "worker_callbacks.h:"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("while rank 0 took its broadcast_decision elsewhere (at line"), std::string::npos)
      << result.output;
  EXPECT_LT(seconds, 45.0) << "at once, not at the collectives' 60 s timeout";
}

TEST_F(DistributedTrainingTest, TorchrunRunEqualsOneProcessWithTheGlobalBatch) {
  testing::TemporaryDirectory dir;
  const int64_t port = find_free_port();
  const auto result = run_command(torchrun() + " --no_python --nproc_per_node 2 "
                                  "--redirects 1 --tee 1 --master_port " + std::to_string(port) + " " +
                                      train_command(dir.path(), "--batch-size 8 --strategy test_grad_avg"),
                                  240);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto lines = trained_lines(result.output);
  ASSERT_EQ(lines.size(), 2u) << result.output;
  EXPECT_EQ(lines[0].env, "torchelastic");
  EXPECT_EQ(lines[0].params, lines[1].params);
  expect_close(lines[0].params, reference_params(), 1e-5, "torchrun 2 ranks × batch 8 vs 1 process × batch 16");
}

// DDP through the Trainer and volt's launcher: every bucket layout and option combination must
// train exactly like one process with the global batch ("auto" with two processes is ddp).
TEST_F(DistributedTrainingTest, DDPRunsEqualOneProcessWithTheGlobalBatch) {
  const auto reference = reference_params();
  // bucket_cap_mb=0.000001 (about a byte): the bias and the weight in buckets of their own (with
  // 10 bytes the bias's 4 would leave room and the weight would join it: one bucket).
  for (const std::string strategy :
       {"ddp", "auto", "ddp:bucket_cap_mb=0.000001,gradient_as_bucket_view=true,static_graph=true",
        "ddp_find_unused_parameters_true"}) {
    testing::TemporaryDirectory dir;
    const auto result =
        run_command(train_command(dir.path(), "--batch-size 8 --devices 2 --strategy \"" + strategy + "\""), 180);
    ASSERT_EQ(result.exit_code, 0) << strategy << "\n" << result.output;
    const auto lines = trained_lines(result.output);
    ASSERT_EQ(lines.size(), 2u) << result.output;
    EXPECT_EQ(lines[0].params, lines[1].params) << strategy << ": ranks ended with different parameters";
    expect_close(lines[0].params, reference, 1e-5, strategy + ": 2 ranks × batch 8 vs 1 process × batch 16");
  }
}

// torchrun --max_restarts 1: rank 1 throws at the start of epoch 1 (after last.ckpt of epoch 0
// was written); every rank exits non-zero, torchrun restarts the group as attempt 1 (keys under
// /worker/attempt_1 of the agent's store), and --ckpt-path last resumes it: the result equals the
// uninterrupted run.
TEST_F(DistributedTrainingTest, TorchrunRestartResumesFromTheLastCheckpoint) {
  testing::TemporaryDirectory dir;
  const int64_t port = find_free_port();
  const auto result = run_command(torchrun() + " --no_python --nproc_per_node 2 "
                                  "--max_restarts 1 --redirects 1 --tee 1 --master_port " + std::to_string(port) +
                                      " " + train_command(dir.path(), "--batch-size 8 --strategy test_grad_avg "
                                      "--checkpoint-every-epoch --crash-rank 1 --crash-epoch 1 --ckpt-path last"),
                                  300);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("deliberate crash at the start of epoch 1"), std::string::npos) << result.output;
  const auto lines = trained_lines(result.output);
  ASSERT_EQ(lines.size(), 2u) << result.output;
  EXPECT_EQ(lines[0].restarts, 1);
  EXPECT_EQ(lines[0].params, lines[1].params);
  expect_close(lines[0].params, reference_params(), 1e-5, "restarted and resumed vs uninterrupted");
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/volt_logs/version_0/checkpoints/last.ckpt"));
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// rank → epoch → indices, from the worker's "SEEN" lines.
std::map<int64_t, std::map<int64_t, std::vector<int64_t>>> seen_lines(const std::string& output) {
  static const std::regex pattern("SEEN rank=(\\d+) epoch=(\\d+) indices=([0-9,]+)");
  std::map<int64_t, std::map<int64_t, std::vector<int64_t>>> seen;
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    auto& indices = seen[std::stoll((*it)[1])][std::stoll((*it)[2])];
    std::stringstream list((*it)[3]);
    std::string value;
    while (std::getline(list, value, ',')) indices.push_back(std::stoll(value));
  }
  return seen;
}

class LaunchedSamplerTest : public ::testing::TestWithParam<int64_t> {};

// 10 samples over n ranks: every rank gets ceil(10/n) of them; together they cover all 10, and
// only the padding (n·ceil(10/n) − 10 repeats) appears twice; each epoch has its own order.
TEST_P(LaunchedSamplerTest, RanksSeeEqualSharesThatCoverTheDataset) {
  const int64_t n = GetParam();
  testing::TemporaryDirectory dir;
  const auto result = run_command(testing::built_binary("tests/distributed_worker") +
                                      " --mode sampler --strategy test_grad_avg --max-epochs 2 --timeout 60"
                                      " --enable-progress-bar false --enable-model-summary false --logger none"
                                      " --enable-checkpointing false --devices " + std::to_string(n) +
                                      " --default-root-dir " + dir.path(),
                                  180);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto seen = seen_lines(result.output);
  ASSERT_EQ(static_cast<int64_t>(seen.size()), n) << result.output;
  const int64_t share = (10 + n - 1) / n;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::map<int64_t, int64_t> counts;
    for (const auto& [rank, epochs] : seen) {
      ASSERT_TRUE(epochs.count(epoch)) << "rank " << rank << " epoch " << epoch;
      EXPECT_EQ(static_cast<int64_t>(epochs.at(epoch).size()), share) << "rank " << rank;
      for (const int64_t i : epochs.at(epoch)) ++counts[i];
    }
    EXPECT_EQ(counts.size(), 10u) << "epoch " << epoch << " misses samples";
    int64_t repeats = 0;
    for (const auto& [index, count] : counts) repeats += count - 1;
    EXPECT_EQ(repeats, share * n - 10) << "epoch " << epoch;
  }
  EXPECT_NE(seen.at(0).at(0), seen.at(0).at(1)) << "the shuffled order must change with the epoch";
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, LaunchedSamplerTest, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
}  // namespace volt
