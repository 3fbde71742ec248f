// Resuming the main job as a user does, through the command line: a fit that max_steps stopped in
// the middle of an epoch continues that epoch (Note [Interrupted epochs]) and ends bitwise where
// an uninterrupted fit ends; and the resumed run never deletes the checkpoint it resumed from,
// nor anything outside its own checkpoint directory (Note [What ModelCheckpoint deletes]).
#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint/checkpoint_io.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

namespace fs = std::filesystem;

const std::string kResumableRun =
    " --max-epochs 3 --limit-train-batches 25 --limit-val-batches 2 --limit-test-batches 2 --batch-size 32"
    " --enable-progress-bar=false --enable-model-summary=false --seed 5 --lr-schedule-steps 75";

ProcessResult run_short_fit(const std::string& flags) {
  return run_command(built_binary("examples/fashion_mnist") + kResumableRun + flags + " 2>&1", 300);
}

StateDict load(const fs::path& path) { return CheckpointIO().load(path); }

void expect_same_weights(const StateDict& resumed, const StateDict& uninterrupted) {
  EXPECT_EQ(resumed.get_int("global_step"), uninterrupted.get_int("global_step"));
  EXPECT_EQ(resumed.get_int("epoch"), uninterrupted.get_int("epoch"));
  const auto a = resumed.child("state_dict"), b = uninterrupted.child("state_dict");
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& key : a.keys()) {
    EXPECT_TRUE(torch::equal(a.get_tensor(key), b.get_tensor(key))) << key << " differs after the resume";
  }
}

TEST(ResumeCli, AMaxStepsStopInTheMiddleOfAnEpochResumesThere) {
  TemporaryDirectory first, uninterrupted;
  // 25 batches per epoch: max_steps 30 stops after batch 5 of epoch 1.
  auto result = run_short_fit(" --max-steps 30 --default-root-dir " + first.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const fs::path stopped = first.file("volt_logs/version_0/checkpoints/epoch=1-step=30.ckpt");
  ASSERT_TRUE(fs::exists(stopped)) << result.output;
  const auto at_stop = load(stopped).child("loops").child("fit_loop");
  EXPECT_EQ(at_stop.get_int("next_batch"), 5);
  EXPECT_FALSE(at_stop.get_bool("epoch_end_started")) << "an interrupted epoch is not finished";

  result = run_short_fit(" --max-steps 60 --ckpt-path " + stopped.string() + " --default-root-dir " + first.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const fs::path resumed = first.file("volt_logs/version_1/checkpoints/epoch=2-step=60.ckpt");
  ASSERT_TRUE(fs::exists(resumed)) << "the resumed run must end at step 60 in epoch 2:\n" << result.output;
  EXPECT_TRUE(fs::exists(stopped)) << "the resumed run deleted the checkpoint it resumed from";

  result = run_short_fit(" --max-steps 60 --default-root-dir " + uninterrupted.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const fs::path reference = uninterrupted.file("volt_logs/version_0/checkpoints/epoch=2-step=60.ckpt");
  ASSERT_TRUE(fs::exists(reference)) << result.output;
  expect_same_weights(load(resumed), load(reference));
}

TEST(ResumeCli, AResumeIntoTheSameDirectoryKeepsTheCheckpointItResumedFrom) {
  TemporaryDirectory root;
  const std::string checkpoints = root.file("ckpts");
  const std::string callback = " --callback model_checkpoint:dirpath=" + checkpoints;
  auto result = run_short_fit(" --max-steps 30" + callback + " --default-root-dir " + root.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const fs::path stopped = fs::path(checkpoints) / "epoch=1-step=30.ckpt";
  ASSERT_TRUE(fs::exists(stopped)) << result.output;
  EXPECT_FALSE(fs::exists(fs::path(checkpoints) / "epoch=0-step=25.ckpt")) << "save_top_k=1 replaces its own files";

  result = run_short_fit(" --max-steps 60" + callback + " --ckpt-path " + stopped.string() + " --default-root-dir " +
                       root.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(fs::exists(stopped)) << "ckpt_path was deleted when the resumed run replaced its best";
  EXPECT_TRUE(fs::exists(fs::path(checkpoints) / "epoch=2-step=60.ckpt")) << result.output;
  EXPECT_FALSE(fs::exists(fs::path(checkpoints) / "epoch=1-step=50.ckpt")) << "the run's own files are replaced";
}

// Issue 21.1, as reported: with a GradientAccumulationScheduler, resuming a checkpoint written in
// the middle of an epoch failed with "accumulate_grad_batches can change only at the start of an
// epoch". It must resume and end bitwise where the uninterrupted run ends.
TEST(ResumeCli, AScheduledAccumulationResumesFromAMidEpochCheckpoint) {
  TemporaryDirectory uninterrupted, resumed;
  const std::string flags =
      " --callback gradient_accumulation_scheduler:scheduling=0:2"
      " --callback model_checkpoint:every_n_train_steps=3,save_top_k=-1 --max-steps 6";
  auto result = run_short_fit(flags + " --default-root-dir " + uninterrupted.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const fs::path step3 = uninterrupted.file("volt_logs/version_0/checkpoints/epoch=0-step=3.ckpt");
  const fs::path step6 = uninterrupted.file("volt_logs/version_0/checkpoints/epoch=0-step=6.ckpt");
  ASSERT_TRUE(fs::exists(step3) && fs::exists(step6)) << result.output;
  EXPECT_EQ(load(step3).child("loops").child("fit_loop").get_int("accumulate_grad_batches"), 2)
      << "the checkpoint records the factor in use, not the option";

  result = run_short_fit(flags + " --ckpt-path " + step3.string() + " --default-root-dir " + resumed.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output.find("accumulate_grad_batches"), std::string::npos)
      << "nothing changed, so nothing to warn about:\n" << result.output;
  const fs::path resumed_step6 = resumed.file("volt_logs/version_0/checkpoints/epoch=0-step=6.ckpt");
  ASSERT_TRUE(fs::exists(resumed_step6)) << result.output;
  expect_same_weights(load(resumed_step6), load(step6));
}

// Issue 14: PowerSGD's state (iteration, error feedback, warm-start Q per bucket) travels in the
// checkpoint, so a 2-rank fit stopped after compression started and resumed ends bitwise equal to
// the uninterrupted fit (PyTorch and Lightning rerun the warm-up instead).
TEST(ResumeCli, APowerSGDFitResumesBitwiseAfterCompressionStarted) {
  TemporaryDirectory first, uninterrupted;
  const std::string flags = " --strategy ddp:comm_hook=powersgd,start_powersgd_iter=3 --devices 2";
  auto result = run_short_fit(flags + " --max-steps 6 --default-root-dir " + first.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const fs::path stopped = first.file("volt_logs/version_0/checkpoints/epoch=0-step=6.ckpt");
  ASSERT_TRUE(fs::exists(stopped)) << result.output;

  result = run_short_fit(flags + " --max-steps 12 --ckpt-path " + stopped.string() + " --default-root-dir " +
                         first.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const fs::path resumed = first.file("volt_logs/version_1/checkpoints/epoch=0-step=12.ckpt");
  ASSERT_TRUE(fs::exists(resumed)) << result.output;

  result = run_short_fit(flags + " --max-steps 12 --default-root-dir " + uninterrupted.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const fs::path reference = uninterrupted.file("volt_logs/version_0/checkpoints/epoch=0-step=12.ckpt");
  ASSERT_TRUE(fs::exists(reference)) << result.output;
  expect_same_weights(load(resumed), load(reference));
}

}  // namespace
}  // namespace volt::testing
