// A sharded checkpoint goes anywhere (Note [Reading a sharded checkpoint anywhere] in
// checkpoint/sharded_checkpoint.h). Two equalities, through the Trainer and volt's launcher:
// - put together, the shards of a run with state_dict_type=sharded are the full checkpoint the
//   same run writes with state_dict_type=full, tensor for tensor and bit for bit (model and
//   optimizer state), for every strategy that writes shards (fsdp with several units and padded
//   shards, every sharding strategy; ddp_sharded; ddp with shard_optimizer) and world size;
// - resumed under another strategy or world size, the sharded checkpoint trains, every rank after
//   every step, bitwise like the full checkpoint resumed there, with one warning saying so.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/sharded_checkpoint.h"
#include "tests/checkpoint/checkpoint_test_support.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt::sharded_anywhere_tests {
namespace {

using testing::run_command;

std::string worker_command(const std::string& root, const std::string& strategy, int64_t devices,
                           const std::string& extra) {
  return testing::adam_train_command(root, "--batch-size 2 --model mlp --strategy \"" + strategy + "\" --devices " +
                                               std::to_string(devices) + " " + extra);
}

// `strategy` with one more option ("fsdp" + "x=1" → "fsdp:x=1", "fsdp:a=1" → "fsdp:a=1,x=1").
std::string with_option(const std::string& strategy, const std::string& option) {
  return strategy + (strategy.find(':') == std::string::npos ? ":" : ",") + option;
}

// Trains one epoch (64 samples) and writes last.ckpt at its end; returns its path.
std::filesystem::path train_and_save(const std::string& root, const std::string& strategy, int64_t devices) {
  const auto result = run_command(worker_command(root, strategy, devices, "--max-epochs 1 --checkpoint-every-epoch"), 240);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return std::filesystem::path(testing::newest_checkpoint(root));
}

struct ShardedCase {
  std::string name;
  std::string strategy;  // without its state_dict_type
  int64_t devices;
};

class ShardsPutTogether : public ::testing::TestWithParam<ShardedCase> {};

TEST_P(ShardsPutTogether, AreTheFullCheckpointOfTheSameRunBitForBit) {
  const auto& c = GetParam();
  testing::TemporaryDirectory sharded_dir, full_dir;
  const auto sharded = train_and_save(sharded_dir.path(), with_option(c.strategy, "state_dict_type=sharded"), c.devices);
  const auto full = train_and_save(full_dir.path(), with_option(c.strategy, "state_dict_type=full"), c.devices);
  ASSERT_TRUE(std::filesystem::is_directory(sharded)) << sharded;
  ASSERT_TRUE(std::filesystem::is_regular_file(full)) << full;

  CheckpointIO io;
  std::vector<std::string> notes;
  const StateDict assembled = assemble_full_checkpoint(io, sharded, &notes);
  const StateDict expected = io.load(full);
  for (const char* key : {"state_dict", "optimizer_states", "epoch", "global_step", "layout"}) {
    EXPECT_EQ(testing::checkpoint_difference(assembled.at(key), expected.at(key), key), "") << c.name;
  }
  EXPECT_EQ(testing::checkpoint_difference(assembled.child("loops").child("fit_loop").at("next_batch"),
                                           expected.child("loops").child("fit_loop").at("next_batch"), "next_batch"),
            "");
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, ShardsPutTogether,
    ::testing::Values(ShardedCase{"FsdpUnitsOn1", "fsdp:min_num_params=20", 1},
                      ShardedCase{"FsdpUnitsOn2", "fsdp:min_num_params=20", 2},
                      ShardedCase{"FsdpUnitsOn3Padded", "fsdp:min_num_params=20", 3},
                      ShardedCase{"FsdpRootOnlyOn4", "fsdp", 4},
                      ShardedCase{"FsdpShardGradOpOn2", "fsdp:min_num_params=20,sharding_strategy=SHARD_GRAD_OP", 2},
                      ShardedCase{"FsdpNoShardOn2", "fsdp:min_num_params=20,sharding_strategy=NO_SHARD", 2},
                      ShardedCase{"DdpShardedOn3", "ddp_sharded", 3},
                      ShardedCase{"DdpShardOptimizerOn2", "ddp:shard_optimizer=true", 2},
                      ShardedCase{"DdpShardOptimizerOn4", "ddp:shard_optimizer=true", 4}),
    [](const auto& info) { return info.param.name; });

struct ResumeCase {
  std::string name;
  std::string saved_strategy;
  int64_t saved_devices;
  std::string resumed_strategy;
  int64_t resumed_devices;
};

class ShardedResumedElsewhere : public ::testing::TestWithParam<ResumeCase> {};

// The saved checkpoints, sharded and full, of each saved strategy and world size: written once for
// the cases that resume them.
std::pair<std::filesystem::path, std::filesystem::path> saved_checkpoints(const std::string& strategy, int64_t devices) {
  static testing::TemporaryDirectory* root = new testing::TemporaryDirectory();  // for the program's life
  static std::map<std::string, std::pair<std::filesystem::path, std::filesystem::path>> saved;
  const std::string key = strategy + " on " + std::to_string(devices);
  if (!saved.count(key)) {
    const std::string dir = root->file(std::to_string(saved.size()));
    saved[key] = {train_and_save(dir + "/sharded", with_option(strategy, "state_dict_type=sharded"), devices),
                  train_and_save(dir + "/full", with_option(strategy, "state_dict_type=full"), devices)};
  }
  return saved[key];
}

TEST_P(ShardedResumedElsewhere, TrainsLikeTheFullCheckpointResumedThere) {
  const auto& c = GetParam();
  const auto [sharded, full] = saved_checkpoints(c.saved_strategy, c.saved_devices);
  ASSERT_FALSE(sharded.empty() || full.empty());

  testing::TemporaryDirectory from_sharded_dir, from_full_dir;
  const std::string resume = "--max-epochs 2 --print-steps --ckpt-path ";
  const auto from_sharded = run_command(
      worker_command(from_sharded_dir.path(), c.resumed_strategy, c.resumed_devices, resume + sharded.string()), 240);
  ASSERT_EQ(from_sharded.exit_code, 0) << from_sharded.output;
  const auto from_full = run_command(
      worker_command(from_full_dir.path(), c.resumed_strategy, c.resumed_devices, resume + full.string()), 240);
  ASSERT_EQ(from_full.exit_code, 0) << from_full.output;

  const std::string warning = "sharded by strategy '" + c.saved_strategy.substr(0, c.saved_strategy.find(':')) +
                              "' over " + std::to_string(c.saved_devices) + " ranks, loaded by '";
  const auto at = from_sharded.output.find(warning);
  ASSERT_NE(at, std::string::npos) << from_sharded.output;
  EXPECT_EQ(from_sharded.output.find(warning, at + 1), std::string::npos) << "printed by rank 0 alone";
  const auto got = testing::step_lines(from_sharded.output);
  ASSERT_EQ(got.size(), static_cast<size_t>(c.resumed_devices)) << from_sharded.output;
  ASSERT_FALSE(got.begin()->second.empty()) << from_sharded.output;
  testing::expect_steps_close(got, testing::step_lines(from_full.output), 0.0,
                              c.name + ": resumed from the sharded checkpoint vs from the full one");
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, ShardedResumedElsewhere,
    ::testing::Values(ResumeCase{"FsdpTwoToDdpThree", "fsdp:min_num_params=20", 2, "ddp", 3},
                      ResumeCase{"FsdpTwoToFsdpThree", "fsdp:min_num_params=20", 2, "fsdp", 3},
                      ResumeCase{"FsdpThreeToOneProcess", "fsdp:min_num_params=20", 3, "single_device", 1},
                      ResumeCase{"DdpShardedTwoToFsdpTwo", "ddp_sharded", 2, "fsdp:min_num_params=20", 2},
                      ResumeCase{"ShardOptimizerTwoToShardedFsdpThree", "ddp:shard_optimizer=true", 2,
                                 "fsdp:min_num_params=20,state_dict_type=sharded", 3},
                      // The same strategy and world size, another wrapping: not this rank's shard.
                      ResumeCase{"FsdpTwoToFsdpOtherUnitsTwo", "fsdp:min_num_params=20", 2,
                                 "fsdp:min_num_params=1000,state_dict_type=sharded", 2},
                      ResumeCase{"FsdpTwoToDdpShardedThree", "fsdp:min_num_params=20", 2, "ddp_sharded", 3},
                      ResumeCase{"FsdpTwoToShardOptimizerTwo", "fsdp:min_num_params=20", 2,
                                 "ddp:shard_optimizer=true", 2},
                      ResumeCase{"FsdpTwoToSlowMoTwo", "fsdp:min_num_params=20", 2, "slowmo", 2},
                      ResumeCase{"FsdpTwoToPostLocalSgdThree", "fsdp:min_num_params=20", 2,
                                 "ddp:comm_hook=post_local_sgd,start_local_sgd_iter=2,model_averaging_period=2", 3}),
    [](const auto& info) { return info.param.name; });

// Bad input: a missing shard, shards of two saves in one directory, a damaged shard; each a
// CheckpointError naming the file.
TEST(ShardedCheckpointErrors, NameTheFileAndWhatIsWrong) {
  testing::TemporaryDirectory dir, other_dir;
  const auto sharded = train_and_save(dir.path(), "fsdp:min_num_params=20,state_dict_type=sharded", 3);
  CheckpointIO io;
  const auto expect_error = [&](const std::filesystem::path& path, const std::string& text) {
    try {
      assemble_full_checkpoint(io, path);
      ADD_FAILURE() << "expected an error containing \"" << text << "\"";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  const auto copy = std::filesystem::path(other_dir.path()) / "copy";
  std::filesystem::copy(sharded, copy);
  std::filesystem::remove(shard_file(copy, 1));
  expect_error(copy, "holds 2 shard files, its shards were written by 3 ranks");

  // shard 1 from a save one epoch later.
  const auto later_root = std::filesystem::path(other_dir.path()) / "later";
  const auto later = run_command(worker_command(later_root.string(), "fsdp:min_num_params=20,state_dict_type=sharded", 3,
                                                "--max-epochs 2 --checkpoint-every-epoch"),
                                 240);
  ASSERT_EQ(later.exit_code, 0) << later.output;
  std::filesystem::copy_file(shard_file(testing::newest_checkpoint(later_root.string()), 1), shard_file(copy, 1));
  expect_error(copy, "shards of two saves are mixed in one directory");

  std::filesystem::remove_all(copy);
  std::filesystem::copy(sharded, copy);
  {
    std::fstream file(shard_file(copy, 2), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(200);
    file.put('\x7f');
  }
  expect_error(copy, "shard_2.ckpt");
}

}  // namespace
}  // namespace volt::sharded_anywhere_tests
