// Recovery as a user meets it (issue 48's two defects). A kill -9 while ModelCheckpoint removes an
// older checkpoint leaves no partial checkpoint under a checkpoint's name (Note [Removing a
// checkpoint] in checkpoint/checkpoint_io.cpp), and `--ckpt-path last` resumes from the newest
// complete one, passing over anything incomplete and saying so. Shards of two saves in one
// directory (another run's shard at the same step, an earlier save's shard) are refused before any
// rank trains, naming the file (Note [A save's identity] in run/checkpoint_header.cpp), by the
// strategy that wrote them and by volt-ckpt verify.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/last_checkpoint.h"
#include "checkpoint/shard_index.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::recovery_tests {
namespace {

using testing::run_command;
namespace fs = std::filesystem;

// The worker's Adam training on 2 ranks under fsdp, checkpointing after every optimizer step and
// keeping only the newest (save_top_k=1: every save removes the one before), in the background.
std::string checkpointing_run(const std::string& root, const std::string& layout, const std::string& extra) {
  return testing::built_binary("tests/distributed_worker") +
         " --mode train --seed 3 --timeout 60 --optimizer adam --enable-progress-bar false" +
         " --enable-model-summary false --num-sanity-val-steps 0 --log-every-n-steps 1 --batch-size 2 --model mlp" +
         " --devices 2 --strategy fsdp:min_num_params=20,state_dict_type=" + layout +
         " --logger none --callback model_checkpoint:every_n_train_steps=1,save_top_k=1,async=true --default-root-dir " +
         root + " " +
         extra;
}

std::vector<fs::path> entries(const fs::path& directory) {
  std::vector<fs::path> out;
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) out.push_back(it->path());
  return out;
}

fs::path checkpoints_of(const std::string& root) {
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_directory() && entry.path().filename() == "checkpoints") return entry.path();
  }
  return {};
}

class KillDuringRemoval : public ::testing::TestWithParam<std::string> {};

TEST_P(KillDuringRemoval, LeavesNoPartialCheckpointAndLastResumesFromTheNewestComplete) {
  testing::TemporaryDirectory dir;
  const std::string root = dir.path();
  // Rank 0 is killed inside the third removal, after the older checkpoint was moved out of the
  // way and before its files were removed; rank 1 then fails on its dead peer.
  const auto killed = run_command("VOLT_CHECKPOINT_TEST_KILL=during_removal:3 " +
                                      checkpointing_run(root, GetParam(), "--max-epochs 1"),
                                  180);
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  const fs::path checkpoints = checkpoints_of(root);
  ASSERT_FALSE(checkpoints.empty()) << killed.output;
  int64_t hidden = 0, visible = 0;
  for (const auto& entry : entries(checkpoints)) {
    const std::string name = entry.filename().string();
    if (name[0] == '.') {
      hidden += name.size() > 9 && name.substr(name.size() - 9) == ".removing";
    } else {
      ++visible;
      EXPECT_EQ(fs::is_directory(entry), GetParam() == "sharded") << name;
    }
  }
  EXPECT_EQ(hidden, 1) << "the checkpoint being removed, out of the way";
  EXPECT_GE(visible, 1);
  const LastCheckpoint last = find_last_checkpoint(root);
  EXPECT_FALSE(last.path.empty());
  EXPECT_TRUE(last.skipped.empty()) << last.skipped.front();

  // The restart resumes, and trains to the end.
  const auto resumed = run_command(checkpointing_run(root, GetParam(), "--max-epochs 1 --ckpt-path last"), 180);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(testing::trained_lines(resumed.output).size(), 2u) << resumed.output;
  for (const auto& entry : entries(checkpoints)) {
    EXPECT_NE(entry.filename().string()[0], '.') << "left behind: " << entry;  // removed by a later removal
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, KillDuringRemoval, ::testing::Values("sharded", "full"));

// A sharded checkpoint directory of `world` shard files written by hand: `save_ids[r]` in each.
void write_shards(const fs::path& directory, const std::vector<int64_t>& save_ids, int64_t global_step) {
  fs::create_directories(directory);
  for (size_t rank = 0; rank < save_ids.size(); ++rank) {
    StateDict shard, header;
    header.set("rank", static_cast<int64_t>(rank));
    header.set("world_size", static_cast<int64_t>(save_ids.size()));
    header.set("save_id", save_ids[rank]);
    shard.set("layout", std::string("sharded"));
    shard.set("shard", header);
    shard.set("epoch", int64_t{0});
    shard.set("global_step", global_step);
    CheckpointIO().save(shard, shard_file(directory, static_cast<int64_t>(rank)));
  }
}

TEST(LastCheckpoint, PassesOverIncompleteCheckpointsAndSaysWhy) {
  testing::TemporaryDirectory dir;
  const fs::path checkpoints = fs::path(dir.path()) / "checkpoints";
  write_shards(checkpoints / "step=1.ckpt", {7, 7}, 1);
  sleep(1);  // file times a second apart
  write_shards(checkpoints / "step=2.ckpt", {9, 9}, 2);
  fs::remove(shard_file(checkpoints / "step=2.ckpt", 1));  // a shard missing
  write_shards(checkpoints / "step=3.ckpt", {11, 12}, 3);  // two saves' shards
  fs::create_directories(checkpoints / ".step=4.ckpt.removing");  // hidden: never a candidate
  const LastCheckpoint last = find_last_checkpoint(dir.path());
  EXPECT_EQ(last.path, checkpoints / "step=1.ckpt");
  ASSERT_EQ(last.skipped.size(), 2u);
  EXPECT_NE(last.skipped[0].find("step=3.ckpt: "), std::string::npos) << last.skipped[0];
  EXPECT_NE(last.skipped[0].find("shards of two saves are mixed"), std::string::npos) << last.skipped[0];
  EXPECT_NE(last.skipped[1].find("step=2.ckpt: "), std::string::npos) << last.skipped[1];
  // The Trainer says so, and refuses when nothing complete is left.
  fs::remove_all(checkpoints / "step=1.ckpt");
  auto options = testing::quiet_options(dir.path());
  Trainer trainer(options);
  const std::string message = testing::error_message_of<CheckpointError>([&] {
    trainer.fit(std::make_shared<testing::RegressionModule>(), std::make_shared<testing::RegressionData>(16, 4), "last");
  });
  EXPECT_NE(message.find("every checkpoint under"), std::string::npos) << message;
  EXPECT_NE(message.find("is incomplete"), std::string::npos) << message;
}

TEST(RemovingACheckpoint, MovesItOutOfTheWayFirst) {
  testing::TemporaryDirectory dir;
  const fs::path checkpoint = fs::path(dir.path()) / "epoch=0.ckpt";
  write_shards(checkpoint, {5, 5}, 1);
  const pid_t child = fork();
  if (child == 0) {
    setenv("VOLT_CHECKPOINT_TEST_KILL", "during_removal", 1);
    CheckpointIO().remove(checkpoint);
    _exit(0);  // not reached: killed inside
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the kill point was not reached";
  EXPECT_FALSE(fs::exists(checkpoint)) << "nothing stays under the checkpoint's name";
  EXPECT_TRUE(fs::exists(fs::path(dir.path()) / ".epoch=0.ckpt.removing"));
  // The next removal in the directory takes what the killed one left.
  write_shards(fs::path(dir.path()) / "epoch=1.ckpt", {6, 6}, 2);
  CheckpointIO().remove(fs::path(dir.path()) / "epoch=1.ckpt");
  EXPECT_TRUE(entries(dir.path()).empty());
}

// The worker's Adam training on 2 ranks under `strategy`, with seed `seed`.
std::string adam_run(const std::string& root, int seed, const std::string& strategy, const std::string& extra) {
  return testing::built_binary("tests/distributed_worker") + " --mode train --seed " + std::to_string(seed) +
         " --timeout 60 --optimizer adam --enable-progress-bar false --enable-model-summary false" +
         " --enable-checkpointing false --num-sanity-val-steps 0 --log-every-n-steps 1 --batch-size 2 --model mlp" +
         " --devices 2 --strategy " + strategy + " --default-root-dir " + root + " " + extra;
}

// Two runs of different seeds save at the same step; run A's directory then gets run B's shard_1.
TEST(ShardsOfTwoSaves, AreRefusedBeforeAnyRankTrainsAndByVerify) {
  testing::TemporaryDirectory dir;
  const std::string fsdp = "fsdp:min_num_params=20,state_dict_type=sharded";
  auto run = [&](const std::string& name, int seed) {
    const auto result = run_command(adam_run(dir.file(name), seed, fsdp, "--max-epochs 1 --checkpoint-every-epoch"), 240);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return testing::newest_checkpoint(dir.file(name));
  };
  const fs::path a = run("a", 3), b = run("b", 4);
  fs::copy_file(shard_file(b, 1), shard_file(a, 1), fs::copy_options::overwrite_existing);
  const auto resumed = run_command(adam_run(dir.file("a"), 3, fsdp, "--max-epochs 2 --ckpt-path " + a.string()), 240);
  EXPECT_NE(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("shard_1.ckpt belongs to save"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("shards of two saves"), std::string::npos) << resumed.output;
  EXPECT_TRUE(testing::trained_lines(resumed.output).empty()) << "no rank trained";
  // Under ddp (every rank reads every shard) and in volt-ckpt verify, the files are named too.
  const auto ddp = run_command(adam_run(dir.file("a"), 3, "ddp", "--max-epochs 2 --ckpt-path " + a.string()), 240);
  EXPECT_NE(ddp.exit_code, 0) << ddp.output;
  EXPECT_NE(ddp.output.find("shard_1.ckpt belongs to save"), std::string::npos) << ddp.output;
  const auto verify = run_command(testing::built_binary("bin/volt-ckpt") + " verify " + a.string() + " 2>&1", 60);
  EXPECT_EQ(verify.exit_code, 1) << verify.output;
  EXPECT_NE(verify.output.find("shard_1.ckpt belongs to save"), std::string::npos) << verify.output;
}

}  // namespace
}  // namespace volt::recovery_tests
