// Checkpoints written in the background (ModelCheckpoint's async=true, Note [Checkpoints written
// in the background]): every file holds exactly what a synchronous save writes at the same step
// although the optimizer went on stepping while it was written (Lightning's #21079 wrote tensors
// the next step had changed); at most one write is in flight; a failed write is reported at the
// next save; the removals of save_top_k wait for the write in flight. A CheckpointIO that takes
// its time stands for a slow disk.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "callbacks/model_checkpoint.h"
#include "checkpoint/checkpoint_io.h"
#include "core/error.h"
#include "strategies/single_device_strategy.h"
#include "tests/checkpoint/checkpoint_test_support.h"

namespace volt::testing {
namespace {

namespace fs = std::filesystem;

// Counts optimizer steps, for a writer to see how far training went while it wrote.
struct StepCounter : Callback {
  void on_train_batch_end(Trainer&, Module&, const torch::Tensor&, const Batch&, int64_t) override { ++steps; }
  std::atomic<int64_t> steps{0};
};

// Sleeps before each write (at least `delay`, and on until a step after the snapshot's ran or a
// second passed, so that a machine busy with other work still lets the training thread in: the
// tests ask whether steps *can* run during a write, not how fast); records how many writes
// overlapped and how many steps ran after each snapshot before its write ended.
class SlowCheckpointIO : public CheckpointIO {
 public:
  SlowCheckpointIO(std::chrono::milliseconds delay, std::shared_ptr<StepCounter> counter, int64_t fail_on_call = 0)
      : delay_(delay), counter_(std::move(counter)), fail_on_call_(fail_on_call) {}
  void save(const StateDict& checkpoint, const fs::path& path) override {
    const int64_t in_flight = ++in_flight_;
    max_in_flight = std::max<int64_t>(max_in_flight, in_flight);
    const int64_t call = ++calls;
    // The step the snapshot was taken at: the writer thread may start after the next step ran.
    const int64_t steps_before = checkpoint.get_int("global_step");
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(delay_);
    while (counter_->steps <= steps_before && std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    steps_during_writes += counter_->steps - steps_before;
    --in_flight_;
    if (call == fail_on_call_) throw CheckpointError("slow disk: write " + std::to_string(call) + " failed");
    CheckpointIO::save(checkpoint, path);
  }
  std::atomic<int64_t> calls{0}, max_in_flight{0}, steps_during_writes{0};

 private:
  std::chrono::milliseconds delay_;
  std::shared_ptr<StepCounter> counter_;
  int64_t fail_on_call_;
  std::atomic<int64_t> in_flight_{0};
};

struct Run {
  fs::path dirpath;
  std::shared_ptr<ModelCheckpoint> checkpoint;
};

// 2 epochs of 6 steps (momentum SGD: optimizer state of its own), a checkpoint after every step.
Run fit_saving_every_step(const fs::path& root, bool async, std::shared_ptr<CheckpointIO> io = nullptr,
                          std::shared_ptr<StepCounter> counter = nullptr, int64_t save_top_k = -1,
                          bool save_last = false) {
  auto options = quiet_options(root.string());
  options.max_epochs = 2;
  auto strategy = std::make_shared<SingleDeviceStrategy>();
  if (io) strategy->set_checkpoint_io(io);
  torch::manual_seed(0);
  auto module = std::make_shared<RegressionModule>(RegressionOptions{.momentum = 0.9});
  Trainer trainer(options, strategy);
  // Before ModelCheckpoint: a step counts before its save, so a writer sees the next step's count.
  if (counter) trainer.add_callback(counter);
  ModelCheckpointOptions checkpoint_options;
  checkpoint_options.dirpath = (root / "checkpoints").string();
  checkpoint_options.every_n_train_steps = 1;
  checkpoint_options.save_top_k = save_top_k;
  checkpoint_options.async_write = async;
  checkpoint_options.save_last = save_last;
  auto checkpoint = std::make_shared<ModelCheckpoint>(checkpoint_options);
  trainer.add_callback(checkpoint);
  trainer.fit(module, std::make_shared<RegressionData>(48, 8));
  return {root / "checkpoints", checkpoint};
}

TEST(BackgroundCheckpointWrite, EveryFileHoldsWhatASynchronousSaveWritesAtThatStep) {
  TemporaryDirectory sync_dir, async_dir;
  const auto sync = fit_saving_every_step(sync_dir.path(), false);
  auto counter = std::make_shared<StepCounter>();
  auto slow = std::make_shared<SlowCheckpointIO>(std::chrono::milliseconds(60), counter);
  const auto async = fit_saving_every_step(async_dir.path(), true, slow, counter);

  EXPECT_GT(slow->steps_during_writes, 0) << "no step ran while a checkpoint was written: nothing raced";
  const auto names = directory_entries(sync.dirpath);
  ASSERT_EQ(names.size(), 12u);
  EXPECT_EQ(directory_entries(async.dirpath), names) << "every write finished by the end of fit";
  for (const auto& name : names) {
    auto expected = read_checkpoint_file(sync.dirpath / name);
    auto got = read_checkpoint_file(async.dirpath / name);
    // The callbacks' section names each run's own directory.
    expected.erase("callbacks");
    got.erase("callbacks");
    EXPECT_EQ(checkpoint_difference(got.to_ivalue(), expected.to_ivalue(), name), "")
        << "the file written in the background differs there";
  }
}

TEST(BackgroundCheckpointWrite, AtMostOneWriteIsInFlightAndTheStepsGoOnMeanwhile) {
  TemporaryDirectory dir;
  auto counter = std::make_shared<StepCounter>();
  auto slow = std::make_shared<SlowCheckpointIO>(std::chrono::milliseconds(40), counter);
  fit_saving_every_step(dir.path(), true, slow, counter);
  EXPECT_EQ(slow->calls, 12);
  EXPECT_EQ(slow->max_in_flight, 1);
  // The next save waits for the write before it, so at most one step runs during each write (none
  // during the last, which the end of fit finishes).
  EXPECT_GT(slow->steps_during_writes, 0);
  EXPECT_LE(slow->steps_during_writes, 11);
}

TEST(BackgroundCheckpointWrite, AFailedWriteStopsTheFitAtTheNextSave) {
  TemporaryDirectory dir;
  auto counter = std::make_shared<StepCounter>();
  auto failing = std::make_shared<SlowCheckpointIO>(std::chrono::milliseconds(1), counter, /*fail_on_call=*/3);
  try {
    fit_saving_every_step(dir.path(), true, failing, counter);
    ADD_FAILURE() << "a failed write in the background went unreported";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("slow disk: write 3 failed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(failing->calls, 3) << "the fit stopped at the save after the failed write";
}

TEST(BackgroundCheckpointWrite, SaveTopKRemovesTheOlderFileOnlyOnceTheNewOneIsWritten) {
  TemporaryDirectory dir;
  auto counter = std::make_shared<StepCounter>();
  auto slow = std::make_shared<SlowCheckpointIO>(std::chrono::milliseconds(20), counter);
  const auto run = fit_saving_every_step(dir.path(), true, slow, counter, /*save_top_k=*/1);
  EXPECT_EQ(directory_entries(run.dirpath), std::vector<std::string>{"epoch=1-step=12.ckpt"});
  EXPECT_EQ(read_checkpoint_file(run.checkpoint->best_model_path()).get_int("global_step"), 12);
}

// save_last beside save_top_k: two files per save, both in the background, the second waiting for
// the first (never two writes at once), and last.ckpt holds the last step's state like the best.
TEST(BackgroundCheckpointWrite, SaveLastWritesItsFileAfterTheOtherOneAtATime) {
  TemporaryDirectory dir;
  auto counter = std::make_shared<StepCounter>();
  auto slow = std::make_shared<SlowCheckpointIO>(std::chrono::milliseconds(20), counter);
  const auto run = fit_saving_every_step(dir.path(), true, slow, counter, /*save_top_k=*/1, /*save_last=*/true);
  EXPECT_EQ(directory_entries(run.dirpath), (std::vector<std::string>{"epoch=1-step=12.ckpt", "last.ckpt"}));
  EXPECT_EQ(slow->calls, 24) << "two writes per save";
  EXPECT_EQ(slow->max_in_flight, 1);
  const auto last = read_checkpoint_file(run.dirpath / "last.ckpt");
  const auto best = read_checkpoint_file(run.dirpath / "epoch=1-step=12.ckpt");
  EXPECT_EQ(last.get_int("global_step"), 12);
  for (const char* key : {"state_dict", "optimizer_states", "loops"}) {
    EXPECT_EQ(checkpoint_difference(last.at(key), best.at(key), key), "");
  }
}

}  // namespace
}  // namespace volt::testing
