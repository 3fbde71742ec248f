// Issue 21.6: DDP's options exercised through the Trainer and volt's launcher (the
// distributed_worker program, two ranks), each against an oracle that a wrong implementation
// fails:
//  - no_sync under --accumulate-grad-batches equals one process on the full batch after every
//    optimizer step, and the window's micro-batches reduce their gradients once (comm bytes);
//  - broadcast_buffers: every rank starts each training forward with rank 0's buffers (batch
//    norm statistics); without it each rank keeps its own (ddp, and the strategies that take the
//    same key: ddp_sharded, slowmo);
//  - gradient_as_bucket_view with find_unused_parameters equals find_unused_parameters alone and
//    one process, with a layer that takes part in some steps only (SGD with momentum: a zero
//    gradient where one process has none would move it).
#include <gtest/gtest.h>

#include <regex>

#include "tests/distributed/worker_runs.h"

namespace volt::testing {
namespace {

ProcessResult run_worker(const std::string& root, const std::string& flags, int timeout_seconds = 180) {
  auto result = run_command(train_command(root, flags), timeout_seconds);
  EXPECT_EQ(result.exit_code, 0) << flags << ":\n" << result.output;
  return result;
}

// One process's steps (rank 0), as every rank of a data-parallel run must reproduce them.
StepParameters for_both_ranks(const StepParameters& one_process) {
  return {{0, one_process.at(0)}, {1, one_process.at(0)}};
}

// What a step inside an epoch of a --devices 2 --batch-size 4 worker run with windows of 2
// communicates: the window's gradients once (8 + 1 float32 = 36 bytes), plus for each of its 2
// micro-batches the synced rank_plus_one (a float64, 8) and rank 0's stop decision (three int64,
// 24: the decision and its site, Note [Which decision]): 100 bytes. Reducing every micro-batch
// would add 36. The first step of an epoch also carries setup
// or the previous epoch's validation, and step 2 rank 0's bucket order (Note [Rebuilt buckets]):
// steps 3, 4, 6, 7, 8 are one window each.
void expect_one_reduction_per_window(const std::string& root, const std::string& strategy) {
  const auto rows = read_csv(root + "/volt_logs/version_0/metrics.csv");
  std::map<int64_t, double> step_bytes;
  for (const auto& row : rows) {
    if (row.count("comm/step_bytes")) step_bytes[std::stoll(row.at("step"))] = std::stod(row.at("comm/step_bytes"));
  }
  for (const int64_t step : {3, 4, 6, 7, 8}) {
    ASSERT_TRUE(step_bytes.count(step)) << strategy << ": step " << step << " was not logged";
    EXPECT_EQ(step_bytes.at(step), 100.0) << strategy << ": step " << step;
  }
}

TEST(DDPThroughTheTrainer, NoSyncAccumulationEqualsOneProcessOnTheFullBatchAfterEveryStep) {
  const std::string windows = " --accumulate-grad-batches 2 --optimizer momentum --print-steps";
  TemporaryDirectory one_dir;
  const auto reference = step_lines(run_worker(one_dir.path(), "--strategy single_device --batch-size 8" + windows).output);
  ASSERT_EQ(reference.size(), 1u);
  ASSERT_EQ(reference.at(0).size(), 8u) << "64 samples, batches of 8, windows of 2: 4 steps an epoch, 2 epochs";
  for (const std::string strategy : {"ddp", "ddp:gradient_as_bucket_view=true"}) {
    TemporaryDirectory dir;
    const auto run = run_worker(dir.path(), "--strategy " + strategy + " --devices 2 --batch-size 4" + windows);
    expect_steps_close(step_lines(run.output), for_both_ranks(reference), 1e-6,
                       strategy + ", 2 ranks × batch 4 vs 1 process × batch 8, windows of 2");
    expect_one_reduction_per_window(dir.path(), strategy);
  }
}

// Issue 20: manual optimization accumulating by hand (toggle_model(false) on the micro-batches that
// do not close a window, manual_backward, step) trains like automatic accumulation on one process,
// after every step. static_graph=true included: its first iteration delays the reduction to the
// end of backward, which a manual backward outside the Trainer's own call used to miss in
// Lightning (#18086); here manual_backward is the Trainer's backward, so it cannot.
TEST(DDPThroughTheTrainer, ManualOptimizationEqualsAutomaticAccumulationOnOneProcessAfterEveryStep) {
  const std::string windows = " --optimizer momentum --print-steps";
  TemporaryDirectory one_dir;
  const auto reference = step_lines(
      run_worker(one_dir.path(), "--strategy single_device --batch-size 8 --accumulate-grad-batches 2" + windows).output);
  ASSERT_EQ(reference.size(), 1u);
  ASSERT_EQ(reference.at(0).size(), 8u);
  TemporaryDirectory manual_one_dir;
  expect_steps_close(
      step_lines(run_worker(manual_one_dir.path(), "--strategy single_device --batch-size 8 --manual-accumulate 2" +
                                                       windows).output),
      reference, 1e-6, "manual accumulation on one process vs automatic");
  for (const std::string strategy : {"ddp", "ddp:static_graph=true", "ddp_sharded"}) {
    TemporaryDirectory dir;
    const auto run = run_worker(dir.path(), "--strategy " + strategy + " --devices 2 --batch-size 4 --manual-accumulate 2" + windows);
    expect_steps_close(step_lines(run.output), for_both_ranks(reference), 1e-6,
                       strategy + " with manual optimization, 2 ranks × batch 4 vs 1 process × batch 8, windows of 2");
    // toggle_model(false) kept the first micro-batch of each window from synchronizing.
    if (strategy != "ddp_sharded") expect_one_reduction_per_window(dir.path(), strategy);
  }
  // The module's own no_sync() in place of toggle_model(false): the same training, and again
  // one reduction per window (without it every micro-batch would reduce: twice the bytes).
  TemporaryDirectory no_sync_dir;
  const auto run = run_worker(no_sync_dir.path(),
                              "--strategy ddp --devices 2 --batch-size 4 --manual-accumulate 2 --manual-no-sync" + windows);
  expect_steps_close(step_lines(run.output), for_both_ranks(reference), 1e-6,
                     "ddp, manual accumulation in Module::no_sync(), 2 ranks × batch 4 vs 1 process × batch 8");
  expect_one_reduction_per_window(no_sync_dir.path(), "ddp with Module::no_sync()");
}

// rank → (epoch, batch) → buffers as that training_step started, from --print-buffers lines.
using BufferLines = std::map<int64_t, std::map<std::pair<int64_t, int64_t>, std::vector<double>>>;

BufferLines buffer_lines(const std::string& output) {
  static const std::regex pattern("BUFFERS rank=(\\d+) epoch=(\\d+) batch=(\\d+) values=(\\S+)");
  BufferLines lines;
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    lines[std::stoll((*it)[1])][{std::stoll((*it)[2]), std::stoll((*it)[3])}] = comma_separated((*it)[4]);
  }
  return lines;
}

class BroadcastBuffersThroughTheTrainer : public ::testing::TestWithParam<std::string> {};

TEST_P(BroadcastBuffersThroughTheTrainer, GivesEveryForwardRankZerosBatchNormStatistics) {
  const std::string strategy = GetParam();
  const std::string flags = " --model batch_norm --print-buffers --devices 2 --batch-size 8";
  TemporaryDirectory with_dir, without_dir;
  const auto with_run = run_worker(with_dir.path(), "--strategy " + strategy + flags);
  const auto without_run = run_worker(without_dir.path(), "--strategy " + strategy + ":broadcast_buffers=false" + flags);
  const auto with = buffer_lines(with_run.output), without = buffer_lines(without_run.output);
  ASSERT_EQ(with.size(), 2u) << with_run.output;
  ASSERT_EQ(without.size(), 2u) << without_run.output;
  ASSERT_EQ(with.at(0).size(), 8u) << "32 samples a rank in batches of 8, 2 epochs";
  ASSERT_EQ(with.at(0).begin()->second.size(), 17u) << "running_mean (8), running_var (8), num_batches_tracked";

  // broadcast_buffers=true: rank 1 starts every training forward with rank 0's buffers, bit for bit.
  for (const auto& [at, rank0] : with.at(0)) {
    EXPECT_EQ(with.at(1).at(at), rank0) << "epoch " << at.first << ", batch " << at.second;
  }
  // Rank 0 never receives buffers, so its statistics (of its own batches) are the same either way.
  EXPECT_EQ(without.at(0), with.at(0));
  // broadcast_buffers=false: equal only as set up (rank 0's, broadcast once), then each rank's own.
  EXPECT_EQ(without.at(1).begin()->second, without.at(0).begin()->second);
  int64_t differing = 0;
  for (const auto& [at, rank0] : without.at(0)) differing += without.at(1).at(at) != rank0 ? 1 : 0;
  EXPECT_EQ(differing, 7) << "every forward after the first sees rank 1's own statistics";

  // Either way the gradients are averaged: the ranks end with the same parameters.
  for (const auto* run : {&with_run, &without_run}) {
    const auto trained = trained_lines(run->output);
    ASSERT_EQ(trained.size(), 2u) << run->output;
    EXPECT_EQ(trained[0].params, trained[1].params);
  }
}

// SlowMo on volt's launcher: both processes on one node, DDP within it (no slow momentum step in
// these 8 steps); its buffers still come from rank 0 over the world, as fairscale's.
INSTANTIATE_TEST_SUITE_P(Strategies, BroadcastBuffersThroughTheTrainer,
                         ::testing::Values("ddp", "ddp_sharded", "slowmo"));

TEST(DDPThroughTheTrainer, BucketViewsWithFindUnusedParametersEqualPlainDDPAndOneProcess) {
  // `branch` takes part in batches 0 and 3 of each epoch's 4 (the same indices on every rank).
  const std::string flags = " --model branch --optimizer momentum --print-steps";
  TemporaryDirectory one_dir;
  const auto reference =
      step_lines(run_worker(one_dir.path(), "--strategy single_device --batch-size 16" + flags).output);
  ASSERT_EQ(reference.size(), 1u);
  const auto& one = reference.at(0);
  ASSERT_EQ(one.size(), 8u);
  // The oracle's own semantics: a step without the branch leaves it alone (no gradient, so SGD
  // skips it, momentum included). Parameters 9-17 are the branch's (after linear's 8 + 1).
  for (const int64_t unused_step : {2, 3, 6, 7}) {
    for (size_t i = 9; i < 18; ++i) {
      EXPECT_EQ(one.at(unused_step).at(i), one.at(unused_step - 1).at(i)) << "step " << unused_step << ", " << i;
    }
  }
  EXPECT_NE(one.at(4).at(9), one.at(3).at(9)) << "a step with the branch moves it";
  // SlowMo's node reducer takes the key too (one node, no slow momentum: DDP within it).
  for (const std::string strategy :
       {"ddp:find_unused_parameters=true", "ddp:find_unused_parameters=true,gradient_as_bucket_view=true",
        "slowmo:nprocs_per_node=2,slowmo_momentum=0,find_unused_parameters=true"}) {
    TemporaryDirectory dir;
    const auto run = run_worker(dir.path(), "--strategy " + strategy + " --devices 2 --batch-size 8" + flags);
    expect_steps_close(step_lines(run.output), for_both_ranks(reference), 1e-6,
                       strategy + ", 2 ranks × batch 8 vs 1 process × batch 16");
  }
  // Without it SlowMo refuses the unused branch as DDP does (the key is used, not only parsed).
  TemporaryDirectory refused_dir;
  const auto refused = run_command(
      train_command(refused_dir.path(), "--strategy slowmo:nprocs_per_node=2,slowmo_momentum=0 --devices 2 "
                                        "--batch-size 8" + flags),
      180);
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("received no gradient"), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace volt::testing
