// volt-ckpt on checkpoints of real runs (an fsdp run's sharded directory and the same run's full
// file): inspect says what is there, verify checks every file, convert puts the shards together
// into the full file, export writes the weights PyTorch loads; bad input (a missing shard, a
// truncated file, a newer format, an unknown command) fails with the file and the fault named,
// exit status 1 (2 for the command line), and no output file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_io.h"
#include "checkpoint/sharded_checkpoint.h"
#include "tests/checkpoint/checkpoint_test_support.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/test_support.h"

namespace volt::volt_ckpt_tests {
namespace {

using testing::run_command;
namespace fs = std::filesystem;

std::string volt_ckpt(const std::string& arguments) {
  return testing::built_binary("bin/volt-ckpt") + " " + arguments + " 2>&1";
}

fs::path fsdp_checkpoint(const std::string& root, const std::string& layout) {
  const auto result = run_command(
      testing::adam_train_command(root, "--batch-size 2 --model mlp --devices 2 --max-epochs 1 --checkpoint-every-epoch "
                                        "--strategy fsdp:min_num_params=20,state_dict_type=" + layout),
      240);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return testing::newest_checkpoint(root);
}

class VoltCkpt : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TemporaryDirectory();
    sharded_ = fsdp_checkpoint(dir_->path() + "/sharded", "sharded");
    full_ = fsdp_checkpoint(dir_->path() + "/full", "full");
  }
  static void TearDownTestSuite() { delete dir_; }
  static testing::TemporaryDirectory* dir_;
  static fs::path sharded_, full_;
};
testing::TemporaryDirectory* VoltCkpt::dir_ = nullptr;
fs::path VoltCkpt::sharded_, VoltCkpt::full_;

TEST_F(VoltCkpt, InspectSaysWhatTheCheckpointHolds) {
  const auto result = run_command(volt_ckpt("inspect " + sharded_.string()), 60);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* line : {"layout: sharded, 2 shards", "strategy: fsdp, world size 2", "epoch: 0", "global_step: 16",
                           "format_version: 1", "sections: ", "optimizer 0: state for 6 parameters"}) {
    EXPECT_NE(result.output.find(line), std::string::npos) << line << " in:\n" << result.output;
  }
  // The MLP's parameters by name, dtype and shape (the body's first Linear(8, 4)).
  EXPECT_NE(result.output.find("body.0.weight  Float [4, 8]  128 B"), std::string::npos) << result.output;
  const auto full = run_command(volt_ckpt("inspect " + full_.string()), 60);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_NE(full.output.find("layout: full"), std::string::npos) << full.output;
}

TEST_F(VoltCkpt, VerifyChecksEveryFile) {
  const auto result = run_command(volt_ckpt("verify " + sharded_.string()), 60);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("OK: " + sharded_.string() + ": 2 files verified"), std::string::npos) << result.output;
}

TEST_F(VoltCkpt, ConvertWritesTheFullCheckpointOfTheSameRun) {
  const auto out = fs::path(dir_->path()) / "converted.ckpt";
  const auto result = run_command(volt_ckpt("convert " + sharded_.string() + " " + out.string()), 60);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto converted = CheckpointIO().load(out);  // written with its checksum
  const auto expected = CheckpointIO().load(full_);
  for (const char* key : {"state_dict", "optimizer_states", "layout"}) {
    EXPECT_EQ(testing::checkpoint_difference(converted.at(key), expected.at(key), key), "");
  }
  const auto again = run_command(volt_ckpt("convert " + full_.string() + " " + out.string() + ".2"), 60);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("is a full checkpoint already; to shard it for N ranks, add --ranks N"), std::string::npos)
      << again.output;
}

// Full -> sharded for N ranks (Note [A full checkpoint sharded for N ranks]): the shards put
// together are the full checkpoint bit for bit, and resuming from them trains like resuming from
// the full file, under fsdp (which reads slices) and ddp (which puts them together).
TEST_F(VoltCkpt, ConvertShardsAFullCheckpointForNRanks) {
  const auto out = fs::path(dir_->path()) / "sharded_for_3";
  const auto result = run_command(volt_ckpt("convert " + full_.string() + " " + out.string() + " --ranks 3"), 60);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("for 3 ranks"), std::string::npos) << result.output;
  for (int64_t r = 0; r < 3; ++r) EXPECT_TRUE(fs::exists(shard_file(out, r))) << r;
  const auto verified = run_command(volt_ckpt("verify " + out.string()), 60);
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  const auto inspected = run_command(volt_ckpt("inspect " + out.string()), 60);
  EXPECT_NE(inspected.output.find("layout: sharded, 3 shards"), std::string::npos) << inspected.output;

  // The full file holds the random states of 2 ranks.
  EXPECT_NE(result.output.find("note: the random states of the 2 ranks that wrote it do not fit 3 ranks: every "
                               "shard holds rank 0's"),
            std::string::npos)
      << result.output;

  CheckpointIO io;
  // Adam's state is partitioned by bytes: each parameter's state goes to the shard with the fewest
  // bytes so far, so no two shards differ by more than the largest parameter's state.
  std::vector<int64_t> state_bytes;
  int64_t largest = 0;
  for (int64_t r = 0; r < 3; ++r) {
    const auto shard = io.load(shard_file(out, r));
    const auto optimizer = StateDict::from_ivalue(shard.at("optimizer_states").toListRef().at(0), "optimizer");
    int64_t bytes = 0;
    for (const auto& entry : optimizer.at("state").toGenericDict()) {
      int64_t size = 0;
      for (const auto& value : entry.value().toGenericDict()) {
        if (value.value().isTensor()) size += static_cast<int64_t>(value.value().toTensor().nbytes());
      }
      bytes += size;
      largest = std::max(largest, size);
    }
    state_bytes.push_back(bytes);
  }
  const auto [least, most] = std::minmax_element(state_bytes.begin(), state_bytes.end());
  EXPECT_GT(*least, 0) << "every shard holds some of the optimizer's state";
  EXPECT_LE(*most - *least, largest) << state_bytes[0] << ", " << state_bytes[1] << ", " << state_bytes[2];

  const auto assembled = assemble_full_checkpoint(io, out);
  const auto expected = io.load(full_);
  for (const char* key : {"state_dict", "optimizer_states", "epoch", "global_step"}) {
    EXPECT_EQ(testing::checkpoint_difference(assembled.at(key), expected.at(key), key), "");
  }

  for (const auto& [strategy, devices] : {std::pair<std::string, int>{"fsdp:min_num_params=20", 3}, {"ddp", 2}}) {
    const auto resume = [&](const fs::path& checkpoint, const std::string& root) {
      return run_command(testing::adam_train_command(root, "--batch-size 2 --model mlp --devices " +
                                                               std::to_string(devices) + " --strategy \"" + strategy +
                                                               "\" --max-epochs 2 --print-steps --ckpt-path " +
                                                               checkpoint.string()),
                         240);
    };
    const auto from_sharded = resume(out, dir_->path() + "/resume_sharded_" + std::to_string(devices));
    ASSERT_EQ(from_sharded.exit_code, 0) << from_sharded.output;
    const auto from_full = resume(full_, dir_->path() + "/resume_full_" + std::to_string(devices));
    ASSERT_EQ(from_full.exit_code, 0) << from_full.output;
    const auto got = testing::step_lines(from_sharded.output);
    ASSERT_EQ(got.size(), static_cast<size_t>(devices)) << from_sharded.output;
    ASSERT_FALSE(got.begin()->second.empty()) << from_sharded.output;
    testing::expect_steps_close(got, testing::step_lines(from_full.output), 0.0,
                                strategy + ": resumed from the converted shards vs from the full file");
  }

  const auto exists = run_command(volt_ckpt("convert " + full_.string() + " " + out.string() + " --ranks 2"), 60);
  EXPECT_EQ(exists.exit_code, 1) << exists.output;
  EXPECT_NE(exists.output.find("exists; name a new directory"), std::string::npos) << exists.output;
  const auto zero = run_command(volt_ckpt("convert " + full_.string() + " " + out.string() + "_0 --ranks 0"), 60);
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
  EXPECT_FALSE(fs::exists(out.string() + "_0"));
}

// What a sharded checkpoint cannot hold, each named in a note: a strategy's own state (PowerSGD's)
// and the gradients of an open accumulation window (a checkpoint written inside one).
TEST_F(VoltCkpt, ConvertNotesWhatItLeavesOut) {
  const auto window = fs::path(dir_->path()) / "powersgd_window.ckpt";
  const auto trained = run_command(
      testing::adam_train_command(dir_->path() + "/powersgd",
                                  "--batch-size 2 --model mlp --devices 2 --max-epochs 1 --accumulate-grad-batches 2 "
                                  "--strategy ddp:comm_hook=powersgd,start_powersgd_iter=2 --save-after-batch 4 "
                                  "--save-after-batch-path " + window.string()),
      240);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto out = fs::path(dir_->path()) / "powersgd_window_for_2";
  const auto result = run_command(volt_ckpt("convert " + window.string() + " " + out.string() + " --ranks 2"), 60);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* note : {"note: the own state of strategy 'ddp' is left out (it restarts)",
                           "note: the gradients accumulated in the open accumulation window are left out"}) {
    EXPECT_NE(result.output.find(note), std::string::npos) << note << " in:\n" << result.output;
  }
  EXPECT_EQ(result.output.find("random states"), std::string::npos) << "2 ranks' random states fit 2:\n" << result.output;
  EXPECT_EQ(run_command(volt_ckpt("verify " + out.string()), 60).exit_code, 0);
}

TEST_F(VoltCkpt, ExportWritesTheWeightsPyTorchLoads) {
  const auto out = fs::path(dir_->path()) / "weights.pt";
  const auto result = run_command(volt_ckpt("export " + sharded_.string() + " " + out.string()), 60);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(testing::checkpoint_difference(read_checkpoint_file(out).to_ivalue(),
                                           CheckpointIO().load(full_).at("state_dict"), "weights"),
            "");
  const auto python = run_command(testing::reference_python() + " -c \"import torch; w = torch.load('" + out.string() +
                                      "'); print('KEYS', sorted(w)); print('SUM', float(sum(t.double().sum() for t in "
                                      "w.values())))\" 2>&1",
                                  120);
  ASSERT_EQ(python.exit_code, 0) << python.output;
  EXPECT_NE(python.output.find("'body.0.weight'"), std::string::npos) << python.output;
}

TEST_F(VoltCkpt, BadInputFailsNamingTheFileAndWritesNothing) {
  const auto broken = fs::path(dir_->path()) / "broken";
  fs::remove_all(broken);
  fs::copy(sharded_, broken);
  fs::remove(shard_file(broken, 1));
  const auto out = fs::path(dir_->path()) / "never.ckpt";
  auto result = run_command(volt_ckpt("convert " + broken.string() + " " + out.string()), 60);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("holds 1 shard files, its shards were written by 2 ranks"), std::string::npos)
      << result.output;
  EXPECT_FALSE(fs::exists(out));

  // A truncated shard.
  fs::copy_file(shard_file(sharded_, 1), shard_file(broken, 1));
  fs::resize_file(shard_file(broken, 1), fs::file_size(shard_file(broken, 1)) / 2);
  result = run_command(volt_ckpt("verify " + broken.string()), 60);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("shard_1.ckpt"), std::string::npos) << result.output;

  // A checkpoint of a newer format.
  const auto future = fs::path(dir_->path()) / "future.ckpt";
  {
    StateDict state;
    state.set("weight", torch::ones({2}));
    std::ofstream file(future, std::ios::binary);
    write_checkpoint_archive(state, [&](const void* data, size_t size) {
      file.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
      return size;
    }, kCheckpointFormatVersion + 1);
  }
  result = run_command(volt_ckpt("inspect " + future.string()), 60);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("by a newer volt"), std::string::npos) << result.output;

  result = run_command(volt_ckpt("inspect " + (fs::path(dir_->path()) / "nothing.ckpt").string()), 60);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("does not exist"), std::string::npos) << result.output;
  result = run_command(volt_ckpt("frobnicate " + full_.string()), 60);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("unknown command 'frobnicate'"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace volt::volt_ckpt_tests
