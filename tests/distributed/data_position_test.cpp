// The data position moves with a checkpoint across world sizes (Note [The data position across
// world sizes] in trainer/loops/epoch_remainder.h): a fit interrupted mid-epoch on 2 processes,
// resumed on 3, interrupted again mid-epoch and finished on 1 process consumes, step after step,
// exactly the samples of an uninterrupted one-process fit in the same global order: none skipped,
// none repeated, and the next epoch is a whole one. The sample ids come from the worker's sampler
// mode (inputs are the ids, shuffled with seed 11), every rank's every batch. The reference builds
// its batches on the training thread, the chain on 3, 1 and 7 loader workers
// (Note [Batches built on worker threads]): workers change neither the batches nor the position.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt::data_position_tests {
namespace {

using testing::run_command;

struct RecordedBatch {
  int64_t rank, epoch, step, batch;
  std::vector<int64_t> indices;
};

std::vector<RecordedBatch> batch_lines(const std::string& output) {
  static const std::regex pattern("BATCH rank=(\\d+) epoch=(\\d+) step=(\\d+) batch=(\\d+) indices=([0-9,]+)");
  std::vector<RecordedBatch> out;
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    RecordedBatch b{std::stoll((*it)[1]), std::stoll((*it)[2]), std::stoll((*it)[3]), std::stoll((*it)[4]), {}};
    std::stringstream list((*it)[5]);
    std::string value;
    while (std::getline(list, value, ',')) b.indices.push_back(std::stoll(value));
    out.push_back(std::move(b));
  }
  return out;
}

// epoch → step → the step's samples in the epoch's global order: rank r's j-th sample of a step
// on R ranks sits at position j*R + r of that step (DistributedSampler deals strided).
using GlobalOrder = std::map<int64_t, std::map<int64_t, std::vector<int64_t>>>;

GlobalOrder global_order(const std::vector<RecordedBatch>& batches, int64_t ranks) {
  std::map<std::pair<int64_t, int64_t>, std::map<int64_t, const RecordedBatch*>> by_step;
  for (const auto& b : batches) {
    const bool first = by_step[{b.epoch, b.step}].emplace(b.rank, &b).second;
    EXPECT_TRUE(first)
        << "rank " << b.rank << " ran two batches at epoch " << b.epoch << " step " << b.step;
  }
  GlobalOrder order;
  for (const auto& [at, per_rank] : by_step) {
    EXPECT_EQ(static_cast<int64_t>(per_rank.size()), ranks) << "epoch " << at.first << " step " << at.second;
    auto& samples = order[at.first][at.second];
    for (size_t j = 0; j < per_rank.begin()->second->indices.size(); ++j) {
      for (const auto& [rank, b] : per_rank) {
        if (j < b->indices.size()) samples.push_back(b->indices[j]);
      }
    }
  }
  return order;
}

std::string sampler_command(const std::string& root, int64_t devices, const std::string& extra) {
  return testing::built_binary("tests/distributed_worker") + " --mode sampler --samples 60 --strategy ddp --timeout 60" +
         " --enable-progress-bar false --enable-model-summary false --logger none --enable-checkpointing false" +
         " --num-sanity-val-steps 0 --devices " + std::to_string(devices) + " --default-root-dir " + root + " " + extra;
}

void expect_once(const std::string& output, const std::string& text) {
  const auto at = output.find(text);
  ASSERT_NE(at, std::string::npos) << "expected \"" << text << "\" in:\n" << output;
  EXPECT_EQ(output.find(text, at + 1), std::string::npos) << "printed by rank 0 alone: " << text;
}

// 60 samples, batch 2 per rank. 2 ranks stop after 4 steps (16 samples of epoch 0), 3 ranks go on
// for 3 steps (18 more, up to 34), one process finishes epoch 0 (26 samples, 13 steps) and runs
// epoch 1 whole.
TEST(DataPosition, AResumeChainOfTwoThreeAndOneRanksConsumesTheEpochsOrderExactlyOnce) {
  testing::TemporaryDirectory dir;
  const std::string root = dir.path();
  const auto reference = run_command(sampler_command(root + "/reference", 1, "--max-epochs 2"), 180);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;

  const std::string first_checkpoint = root + "/two_ranks.ckpt", second_checkpoint = root + "/three_ranks.ckpt";
  const auto two = run_command(
      sampler_command(root + "/two", 2, "--max-epochs 2 --max-steps 4 --loader-workers 3 --save-at-end " + first_checkpoint),
      180);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto three = run_command(sampler_command(root + "/three", 3,
                                                 "--max-epochs 2 --max-steps 7 --loader-workers 1 --ckpt-path " +
                                                     first_checkpoint +
                                                     " --save-at-end " + second_checkpoint),
                                 180);
  ASSERT_EQ(three.exit_code, 0) << three.output;
  const auto one = run_command(
      sampler_command(root + "/one", 1, "--max-epochs 2 --loader-workers 7 --ckpt-path " + second_checkpoint), 180);
  ASSERT_EQ(one.exit_code, 0) << one.output;

  expect_once(three.output, "16 of its 60 samples in, by 2 ranks with batch 2 (4 samples per step); this run has 3 "
                            "ranks with batch 2 (6 samples per step): the rest of epoch 0 continues with the 44 "
                            "samples not yet consumed, in the same order, in 8 more batches per rank");
  expect_once(one.output, "34 of its 60 samples in, by 3 ranks with batch 2 (6 samples per step); this run has 1 "
                          "rank with batch 2 (2 samples per step): the rest of epoch 0 continues with the 26 samples "
                          "not yet consumed, in the same order, in 13 more batches per rank");

  const GlobalOrder expected = global_order(batch_lines(reference.output), 1);
  ASSERT_EQ(expected.size(), 2u) << reference.output;
  GlobalOrder chain = global_order(batch_lines(two.output), 2);
  for (const auto& [part, ranks] : {std::pair{&three.output, 3}, std::pair{&one.output, 1}}) {
    for (const auto& [epoch, steps] : global_order(batch_lines(*part), ranks)) {
      for (const auto& [step, samples] : steps) {
        EXPECT_TRUE(chain[epoch].emplace(step, samples).second) << "step " << step << " of epoch " << epoch << " ran twice";
      }
    }
  }
  ASSERT_EQ(chain.at(0).size(), 4u + 3u + 13u) << "steps of epoch 0 across the chain";
  ASSERT_EQ(chain.at(0).rbegin()->first, 19);
  for (const int64_t epoch : {0, 1}) {
    std::vector<int64_t> want, got;
    for (const auto& [step, samples] : expected.at(epoch)) want.insert(want.end(), samples.begin(), samples.end());
    for (const auto& [step, samples] : chain.at(epoch)) got.insert(got.end(), samples.begin(), samples.end());
    ASSERT_EQ(want.size(), 60u);
    EXPECT_EQ(got, want) << "epoch " << epoch << ": the chain must consume the one-process order, sample for sample";
  }
  // Epoch 1 ran whole on one process: the same steps as the reference's (numbered 20 on, after
  // epoch 0's 20 steps in the chain and 30 in the reference).
  EXPECT_EQ(chain.at(1).size(), 30u);
}

// The same world size resumes at the next batch index, as it always did: no remainder, no warning,
// and the batches are those of the uninterrupted run.
// A checkpoint written after an epoch's last batch (ModelCheckpoint in on_train_batch_end, the
// epoch's end hooks not yet run) and resumed at another world size: the epoch ends there, said as
// such, and the next one is whole.
TEST(DataPosition, ACheckpointAfterTheEpochsLastBatchResumesAtTheEpochsEnd) {
  testing::TemporaryDirectory dir;
  const std::string root = dir.path();
  // 60 samples, 2 ranks of batch 2: 15 steps an epoch; the 15th step's checkpoint.
  const auto two = run_command(testing::built_binary("tests/distributed_worker") +
                                   " --mode sampler --samples 60 --strategy ddp --timeout 60 --enable-progress-bar false"
                                   " --enable-model-summary false --logger none --num-sanity-val-steps 0 --devices 2"
                                   " --max-epochs 1 --callback model_checkpoint:every_n_train_steps=15,save_last=true"
                                   " --default-root-dir " + root + "/two",
                               180);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto checkpoint = testing::newest_checkpoint(root + "/two");
  const auto three = run_command(sampler_command(root + "/three", 3, "--max-epochs 2 --ckpt-path " + checkpoint.string()), 180);
  ASSERT_EQ(three.exit_code, 0) << three.output;
  expect_once(three.output, "was written at the end of epoch 0, after its last batch (all 60 of its samples consumed), "
                            "by 2 ranks with batch 2 (4 samples per step); this run has 3 ranks with batch 2 (6 samples "
                            "per step): epoch 0 ends here, and the next epoch is a whole one");
  const GlobalOrder resumed = global_order(batch_lines(three.output), 3);
  EXPECT_EQ(resumed.count(0), 0u) << "no batch of epoch 0 again";
  ASSERT_EQ(resumed.count(1), 1u) << three.output;
  EXPECT_EQ(resumed.at(1).size(), 10u) << "a whole epoch at 6 samples per step";
}

// The Module's own view of where it runs (Module::global_rank, local_rank, world_size): one node,
// so the local rank is the global one.
TEST(DataPosition, EachRanksModuleKnowsItsRanksAndTheWorldSize) {
  testing::TemporaryDirectory dir;
  const auto run = run_command(sampler_command(dir.path(), 3, "--max-epochs 1 --max-steps 2"), 180);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  static const std::regex pattern("BATCH rank=(\\d+) .* local_rank=(\\d+) world_size=(\\d+)");
  std::set<std::string> ranks;
  for (std::sregex_iterator it(run.output.begin(), run.output.end(), pattern), end; it != end; ++it) {
    ranks.insert((*it)[1]);
    EXPECT_EQ((*it)[2], (*it)[1]);
    EXPECT_EQ((*it)[3], "3");
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2"})) << run.output;
}

TEST(DataPosition, TheSameWorldSizeResumesWithoutAWarning) {
  testing::TemporaryDirectory dir;
  const std::string root = dir.path(), checkpoint = root + "/two_ranks.ckpt";
  const auto whole = run_command(sampler_command(root + "/whole", 2, "--max-epochs 1"), 180);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto first = run_command(sampler_command(root + "/first", 2, "--max-epochs 1 --max-steps 5 --save-at-end " + checkpoint), 180);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto rest = run_command(sampler_command(root + "/rest", 2, "--max-epochs 1 --ckpt-path " + checkpoint), 180);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_EQ(rest.output.find("samples not yet consumed"), std::string::npos) << rest.output;
  GlobalOrder chain = global_order(batch_lines(first.output), 2);
  const GlobalOrder resumed = global_order(batch_lines(rest.output), 2);
  ASSERT_TRUE(resumed.count(0)) << rest.output;
  for (const auto& [step, samples] : resumed.at(0)) chain[0][step] = samples;
  EXPECT_EQ(chain, global_order(batch_lines(whole.output), 2));
}

}  // namespace
}  // namespace volt::data_position_tests
