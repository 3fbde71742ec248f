// ModelCheckpoint: file names and directories, top-k retention (NaN ranks worst), triggers,
// save_last, weights-only files, the version counter, and a resumed fit that keeps ranking against
// the first run's files (with EarlyStopping's and Timer's state restored too).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include "checkpoint/checkpoint_io.h"
#include "strategies/loaded_checkpoint.h"
#include "tests/support/test_doubles.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

namespace fs = std::filesystem;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::set<std::string> files_in(const std::string& directory) {
  std::set<std::string> names;
  std::error_code ignored;
  if (!fs::is_directory(directory, ignored)) return names;
  for (const auto& entry : fs::directory_iterator(directory)) names.insert(entry.path().filename().string());
  return names;
}

struct FitResult {
  std::unique_ptr<Trainer> trainer;
  std::shared_ptr<ModelCheckpoint> checkpoint;
};

// 4 training batches (steps) per epoch, one validation batch.
FitResult fit_with(const std::string& root, ModelCheckpointOptions mc, std::vector<double> script, int64_t epochs,
             std::vector<std::string> loggers = {}, const std::string& ckpt_path = "",
             std::vector<std::shared_ptr<Callback>> extra = {}) {
  auto options = quiet_options(root);
  options.max_epochs = epochs;
  options.loggers = std::move(loggers);
  FitResult run{std::make_unique<Trainer>(options), std::make_shared<ModelCheckpoint>(mc)};
  run.trainer->add_callback(run.checkpoint);
  for (auto& callback : extra) run.trainer->add_callback(callback);
  run.trainer->fit(std::make_shared<ScriptedModule>(std::move(script)),
                   std::make_shared<RegressionData>(32, 8, false, 0, 8), ckpt_path);
  return run;
}

TEST(ModelCheckpoint, NamesFollowTheTemplateUnderTheLoggersDirectory) {
  TemporaryDirectory dir;
  auto run = fit_with(dir.path(), {.filename = "{epoch}-{step}-{score:.3f}", .save_top_k = -1}, {0.5, 0.25, 0.125}, 3,
                      {"csv"});
  const std::string expected_dir = dir.path() + "/volt_logs/version_0/checkpoints";
  EXPECT_EQ(run.checkpoint->dirpath(), expected_dir);
  EXPECT_EQ(files_in(expected_dir), (std::set<std::string>{"epoch=0-step=4-score=0.500.ckpt",
                                                           "epoch=1-step=8-score=0.250.ckpt",
                                                           "epoch=2-step=12-score=0.125.ckpt"}));
  EXPECT_EQ(run.checkpoint->best_model_path(), expected_dir + "/epoch=2-step=12-score=0.125.ckpt");
}

TEST(ModelCheckpoint, WithoutALoggerTheLatestGoesToTheRootsCheckpointsDirectory) {
  TemporaryDirectory dir;
  auto run = fit_with(dir.path(), {}, {1}, 3);
  EXPECT_EQ(files_in(dir.file("checkpoints")), (std::set<std::string>{"epoch=2-step=12.ckpt"}))
      << "save_top_k 1 without monitor keeps only the newest";
}

TEST(ModelCheckpoint, KeepsTheTopKByTheMonitoredMetricAndNaNRanksWorst) {
  TemporaryDirectory dir;
  const std::vector<double> scores{5, kNaN, 3, 4, 1, 2};
  auto run = fit_with(dir.path(), {.dirpath = dir.file("ckpt"), .monitor = "score", .save_top_k = 2, .save_last = true},
                      scores, 6);
  EXPECT_EQ(files_in(dir.file("ckpt")),
            (std::set<std::string>{"epoch=4-step=20.ckpt", "epoch=5-step=24.ckpt", "last.ckpt"}));
  EXPECT_EQ(run.checkpoint->best_model_path(), dir.file("ckpt/epoch=4-step=20.ckpt"));
  EXPECT_DOUBLE_EQ(run.checkpoint->best_model_score(), 1);
  EXPECT_EQ(run.checkpoint->last_model_path(), dir.file("ckpt/last.ckpt"));

  // Mode max, and a NaN that arrives while there is room: it is kept, then dropped first.
  TemporaryDirectory max_dir;
  auto max_run = fit_with(max_dir.path(), {.dirpath = max_dir.file("ckpt"), .monitor = "score", .mode = MonitorMode::Max,
                                           .save_top_k = 2},
                          {kNaN, 0.5, 0.25, 0.75}, 4);
  EXPECT_EQ(files_in(max_dir.file("ckpt")), (std::set<std::string>{"epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt"}));
  EXPECT_DOUBLE_EQ(max_run.checkpoint->best_model_score(), 0.75);
}

// The decisions asked of rank 0 and the removals, in order (one process: rank 0's decision is
// this process's own).
class DecisionLog : public SingleDeviceStrategy {
 public:
  DecisionLog() {
    hold(std::make_shared<Decisions>(events));
    set_checkpoint_io(std::make_shared<Removals>(events));
  }
  std::vector<std::string> events;

 private:
  struct Decisions : StrategyCollectives {
    explicit Decisions(std::vector<std::string>& events) : events(events) {}
    bool broadcast_decision(bool decision, std::source_location = std::source_location::current()) override {
      events.push_back(decision ? "decided yes" : "decided no");
      return decision;
    }
    std::vector<std::string>& events;
  };
  struct Removals : CheckpointIO {
    explicit Removals(std::vector<std::string>& events) : events(events) {}
    void remove(const fs::path& path) override {
      events.push_back("remove");
      CheckpointIO::remove(path);
    }
    std::vector<std::string>& events;
  };
};

TEST(ModelCheckpoint, WhetherAnOldFileGoesIsRankZerosDecision) {
  // Whether a replaced checkpoint may be removed is read from the disk. Each rank reading it for
  // itself raced rank 0's removal of that very file: a rank that then skipped the removal (a
  // collective) paired every later collective with the wrong one (the fsdp main job stalled, or
  // a rank stopped fitting on another's answer). Every removal follows rank 0's decision: the new
  // name (no collision), the write (it succeeded), then whether the old file goes.
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 2;
  auto strategy = std::make_shared<DecisionLog>();
  Trainer trainer(options, strategy);
  trainer.add_callback(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = dir.file("ckpts")}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{3, 2}), std::make_shared<RegressionData>(32, 8));
  const auto& events = strategy->events;
  const auto removal = std::find(events.begin(), events.end(), "remove");
  ASSERT_NE(removal, events.end()) << "the second epoch's checkpoint replaces the first";
  ASSERT_GE(removal - events.begin(), 3);
  EXPECT_EQ(std::vector<std::string>(removal - 3, removal),
            (std::vector<std::string>{"decided no", "decided yes", "decided yes"}));
  EXPECT_EQ(files_in(dir.file("ckpts")).size(), 1u);
}

TEST(ModelCheckpoint, SaveTopKZeroWritesOnlyLastAndMinusOneKeepsAll) {
  TemporaryDirectory dir;
  fit_with(dir.path(), {.dirpath = dir.file("last_only"), .monitor = "score", .save_top_k = 0, .save_last = true},
           {3, 2, 1}, 3);
  EXPECT_EQ(files_in(dir.file("last_only")), (std::set<std::string>{"last.ckpt"}));
  fit_with(dir.path(), {.dirpath = dir.file("all"), .monitor = "score", .save_top_k = -1}, {3, 2, 1}, 3);
  EXPECT_EQ(files_in(dir.file("all")).size(), 3u);
}

TEST(ModelCheckpoint, EveryNTrainStepsAndEveryNEpochs) {
  TemporaryDirectory dir;
  fit_with(dir.path(), {.dirpath = dir.file("steps"), .save_top_k = -1, .every_n_train_steps = 3}, {1}, 2);
  EXPECT_EQ(files_in(dir.file("steps")), (std::set<std::string>{"epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt"}));
  fit_with(dir.path(), {.dirpath = dir.file("epochs"), .save_top_k = -1, .every_n_epochs = 2}, {1}, 5);
  EXPECT_EQ(files_in(dir.file("epochs")), (std::set<std::string>{"epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt"}));
}

TEST(ModelCheckpoint, TrainTimeIntervalSavesOnceThatMuchTrainingTimePassed) {
  TemporaryDirectory dir;
  auto fit_timed = [&](const std::string& sub, std::chrono::seconds interval, std::chrono::milliseconds pause) {
    auto options = quiet_options(dir.path());
    options.max_epochs = 2;
    Trainer trainer(options);
    trainer.add_callback(std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions{.dirpath = dir.file(sub), .save_top_k = -1, .train_time_interval = interval}));
    trainer.fit(std::make_shared<SlowModule>(pause), std::make_shared<RegressionData>(16, 8, false, 0, 8));
  };
  // Every step sleeps longer than the interval: every step saves, and nothing else does (the
  // interval replaces the per-epoch trigger).
  fit_timed("each_step", std::chrono::seconds(1), std::chrono::milliseconds(1050));
  EXPECT_EQ(files_in(dir.file("each_step")),
            (std::set<std::string>{"epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt", "epoch=1-step=3.ckpt",
                                   "epoch=1-step=4.ckpt"}));
  fit_timed("never", std::chrono::seconds(3600), std::chrono::milliseconds(0));
  EXPECT_EQ(files_in(dir.file("never")), std::set<std::string>{});
}

TEST(ModelCheckpoint, WeightsOnlyFilesHoldNoTrainingState) {
  TemporaryDirectory dir;
  auto run = fit_with(dir.path(), {.dirpath = dir.file("w"), .save_weights_only = true}, {1}, 1);
  const StateDict saved = run.trainer->strategy().load_checkpoint(run.checkpoint->best_model_path()).state;
  EXPECT_TRUE(saved.at("weights_only").toBool());
  EXPECT_FALSE(saved.contains("optimizer_states"));
  EXPECT_TRUE(saved.contains("state_dict"));
}

TEST(ModelCheckpoint, ANameThatExistsGetsAVersionSuffix) {
  TemporaryDirectory dir;
  fit_with(dir.path(), {.dirpath = dir.file("c"), .filename = "model"}, {1}, 1);
  fit_with(dir.path(), {.dirpath = dir.file("c"), .filename = "model"}, {1}, 1);
  EXPECT_EQ(files_in(dir.file("c")), (std::set<std::string>{"model.ckpt", "model-v1.ckpt"}));
}

TEST(ModelCheckpoint, AMonitorThatIsNeverLoggedIsAnError) {
  TemporaryDirectory dir;
  try {
    fit_with(dir.path(), {.monitor = "val_acc"}, {1}, 1);
    FAIL() << "expected a ConfigurationError";
  } catch (const ConfigurationError& e) {
    EXPECT_NE(std::string(e.what()).find("'val_acc' was not logged"), std::string::npos) << e.what();
  }
}

TEST(ModelCheckpoint, OptionsAreValidatedAndComeFromTheRegistry) {
  EXPECT_THROW(ModelCheckpoint({.save_top_k = 3}), ConfigurationError) << "top 3 of what?";
  EXPECT_THROW(ModelCheckpoint({.save_top_k = -2}), ConfigurationError);
  EXPECT_THROW(ModelCheckpoint({.every_n_train_steps = 5, .every_n_epochs = 1}), ConfigurationError);
  EXPECT_THROW(ModelCheckpoint({.filename = "a/b"}), ConfigurationError);
  EXPECT_THROW(ModelCheckpoint({.filename = "{epoch"}), ConfigurationError);
  auto built = std::dynamic_pointer_cast<ModelCheckpoint>(
      callback_registry().create("model_checkpoint:monitor=val_acc,mode=max,save_top_k=2,train_time_interval=00:00:30:00"));
  ASSERT_NE(built, nullptr);
  EXPECT_EQ(built->options().save_top_k, 2);
  EXPECT_EQ(built->options().mode, MonitorMode::Max);
  EXPECT_EQ(built->options().train_time_interval->count(), 1800);
}

TEST(ModelCheckpoint, FromTheCommandLineKeepsTheTwoBestByValAcc) {
  TemporaryDirectory dir;
  Trainer trainer(options_from_args({"--callback", "model_checkpoint:monitor=val_acc,mode=max,save_top_k=2",
                                     "--default-root-dir", dir.path(), "--max-epochs", "4", "--enable-progress-bar",
                                     "false", "--enable-model-summary", "false", "--num-sanity-val-steps", "0"}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{0.5, 0.9, 0.7, 0.8}, "val_acc"),
              std::make_shared<RegressionData>(32, 8, false, 0, 8));
  // The CSV logger (the default) puts the directory under its version; the configured
  // ModelCheckpoint replaces the default one (which would keep only the newest epoch).
  const std::string checkpoints = dir.path() + "/volt_logs/version_0/checkpoints";
  EXPECT_EQ(files_in(checkpoints), (std::set<std::string>{"epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt"}));
  int64_t checkpoint_callbacks = 0;
  for (const auto& callback : trainer.callbacks()) checkpoint_callbacks += dynamic_cast<ModelCheckpoint*>(callback.get()) != nullptr;
  EXPECT_EQ(checkpoint_callbacks, 1);
}

TEST(ModelCheckpoint, TheTrainerAddsOneUnlessCheckpointingIsOff) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 2;
  options.enable_checkpointing = true;
  Trainer trainer(options);
  trainer.fit(std::make_shared<RegressionModule>(), std::make_shared<RegressionData>(32, 8));
  EXPECT_EQ(files_in(dir.file("checkpoints")), (std::set<std::string>{"epoch=1-step=8.ckpt"}));
}

TEST(ModelCheckpoint, AResumedFitKeepsRankingAgainstTheFirstRunsFiles) {
  TemporaryDirectory dir;
  const std::vector<double> scores{5, 2, 4, 3, 1, 6};
  const ModelCheckpointOptions mc{.dirpath = dir.file("ckpt"), .monitor = "score", .save_top_k = 2, .save_last = true};
  // First run: epochs 0-2 (scores 5, 2, 4): keeps epochs 1 and 2.
  auto early = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "score", .patience = 10});
  auto timer = std::make_shared<Timer>("99:00:00:00");  // far above the saved time set below
  auto first = fit_with(dir.path(), mc, scores, 3, {}, "", {early, timer});
  EXPECT_EQ(files_in(dir.file("ckpt")),
            (std::set<std::string>{"epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt", "last.ckpt"}));
  EXPECT_EQ(early->wait_count(), 1);
  // The Timer's saved training time is set far above anything a run here takes, so that only a
  // restore can bring the resumed Timer past it (issue 21.7: comparing with the first run's own
  // time passed without any restore, since the second run trains as long as the first).
  constexpr double kSavedTrainSeconds = 100000.0;
  {
    CheckpointIO io;
    auto checkpoint = io.load(dir.file("ckpt/last.ckpt"));
    auto callbacks = checkpoint.child("callbacks");
    bool found = false;
    for (const auto& key : callbacks.keys()) {
      if (key.find("Timer") == std::string::npos) continue;
      auto state = callbacks.child(key);
      auto elapsed = state.child("time_elapsed");
      elapsed.set("train", kSavedTrainSeconds);
      state.set("time_elapsed", elapsed);
      callbacks.set(key, state);
      found = true;
    }
    ASSERT_TRUE(found) << "no Timer state in the checkpoint";
    checkpoint.set("callbacks", callbacks);
    io.save(checkpoint, dir.file("ckpt/last.ckpt"));
  }

  // Resumed to 6 epochs (scores 3, 1, 6): epoch 3 (3) pushes out epoch 2 (4), epoch 4 (1) pushes out
  // epoch 3; epoch 5 (6) does not enter. Without the restored ranking, the first run's files would
  // be forgotten and epochs 3 and 4 would be the "top 2" beside stale files.
  auto early_resumed = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "score", .patience = 10});
  auto timer_resumed = std::make_shared<Timer>("99:00:00:00");  // far above the saved time set below
  auto second = fit_with(dir.path(), mc, scores, 6, {}, dir.file("ckpt/last.ckpt"), {early_resumed, timer_resumed});
  EXPECT_EQ(second.trainer->current_epoch(), 6);
  EXPECT_EQ(files_in(dir.file("ckpt")), (std::set<std::string>{"epoch=1-step=8.ckpt", "epoch=4-step=20.ckpt", "last.ckpt"}));
  EXPECT_EQ(second.checkpoint->best_model_path(), dir.file("ckpt/epoch=4-step=20.ckpt"));
  EXPECT_DOUBLE_EQ(second.checkpoint->best_model_score(), 1);
  // EarlyStopping continued from wait 1 (epoch 2): epoch 3 improves on 2? No (3 > 2): wait 2;
  // epoch 4 (1): best, wait 0; epoch 5 (6): wait 1.
  EXPECT_EQ(early_resumed->wait_count(), 1);
  EXPECT_DOUBLE_EQ(early_resumed->best_score(), 1);
  // The Timer's budget continued from the saved training time.
  EXPECT_GE(timer_resumed->time_elapsed("train"), kSavedTrainSeconds);
  EXPECT_LT(timer->time_elapsed("train"), kSavedTrainSeconds);
}

}  // namespace
}  // namespace volt::testing
