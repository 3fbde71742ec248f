// EarlyStopping: patience and min_delta, both modes, thresholds, NaN, strictness, its checkpoint
// state, and that the stop decision goes through the strategy's broadcast.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/test_doubles.h"
#include "tests/support/test_support.h"
#include "checkpoint/checkpoint_io.h"

namespace volt::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Outcome {
  int64_t epochs_run;
  std::shared_ptr<EarlyStopping> callback;
};

Outcome fit_with(EarlyStoppingOptions es, std::vector<double> script, int64_t max_epochs = 20,
                 std::shared_ptr<Strategy> strategy = nullptr) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = max_epochs;
  auto callback = std::make_shared<EarlyStopping>(es);
  auto trainer = strategy ? std::make_unique<Trainer>(options, strategy) : std::make_unique<Trainer>(options);
  trainer->add_callback(callback);
  trainer->fit(std::make_shared<ScriptedModule>(std::move(script)), std::make_shared<RegressionData>(16, 8, false, 0, 8));
  return {trainer->current_epoch(), callback};
}

TEST(EarlyStopping, StopsAfterPatienceChecksWithoutImprovement) {
  const auto out = fit_with({.monitor = "score", .patience = 2}, {5, 4, 4.5, 4.2, 4.1, 1});
  // Epoch 1 is the best (4); epochs 2 and 3 do not improve: stop at epoch 3.
  EXPECT_EQ(out.callback->stopped_epoch(), 3);
  EXPECT_EQ(out.epochs_run, 4);
  EXPECT_EQ(out.callback->wait_count(), 2);
  EXPECT_DOUBLE_EQ(out.callback->best_score(), 4);
  EXPECT_NE(out.callback->stop_reason().find("did not improve"), std::string::npos);
}

TEST(EarlyStopping, AnImprovementMustExceedMinDelta) {
  // min_delta 0.3: 4.8 is not enough below 5 (wait 1), 4.6 is (best), 4.4 and 4.35 are not.
  const auto out = fit_with({.monitor = "score", .min_delta = 0.3, .patience = 2}, {5, 4.8, 4.6, 4.4, 4.35, 0});
  EXPECT_EQ(out.callback->stopped_epoch(), 4);
  EXPECT_DOUBLE_EQ(out.callback->best_score(), 4.6);
  // Without min_delta every decrease counts and the run goes on to max_epochs.
  const auto strict_decrease = fit_with({.monitor = "score", .patience = 2}, {5, 4.8, 4.6, 4.4, 4.35, 0}, 6);
  EXPECT_EQ(strict_decrease.callback->stopped_epoch(), -1);
  EXPECT_EQ(strict_decrease.epochs_run, 6);
}

TEST(EarlyStopping, ModeMaxWatchesForIncreases) {
  const auto out = fit_with({.monitor = "score", .patience = 1, .mode = MonitorMode::Max}, {0.5, 0.7, 0.7, 0.9});
  EXPECT_EQ(out.callback->stopped_epoch(), 2) << "0.7 does not beat 0.7";
  EXPECT_DOUBLE_EQ(out.callback->best_score(), 0.7);
}

TEST(EarlyStopping, StoppingAndDivergenceThresholdsStopAtOnce) {
  const auto reached = fit_with({.monitor = "score", .patience = 100, .stopping_threshold = 1.0}, {3, 2, 1.0, 0.5});
  EXPECT_EQ(reached.callback->stopped_epoch(), 3) << "1.0 is not below the threshold 1.0; 0.5 is";
  EXPECT_NE(reached.callback->stop_reason().find("stopping threshold"), std::string::npos);

  const auto diverged = fit_with({.monitor = "score", .patience = 100, .divergence_threshold = 10}, {3, 2, 11, 1});
  EXPECT_EQ(diverged.callback->stopped_epoch(), 2);
  EXPECT_NE(diverged.callback->stop_reason().find("divergence"), std::string::npos);

  const auto max_mode = fit_with(
      {.monitor = "score", .patience = 100, .mode = MonitorMode::Max, .divergence_threshold = 0.1}, {0.5, 0.6, 0.05});
  EXPECT_EQ(max_mode.callback->stopped_epoch(), 2);
}

TEST(EarlyStopping, ANonFiniteMetricStopsUnlessCheckFiniteIsOff) {
  const auto stopped = fit_with({.monitor = "score", .patience = 100}, {3, kNaN, 1});
  EXPECT_EQ(stopped.callback->stopped_epoch(), 1);
  EXPECT_NE(stopped.callback->stop_reason().find("not finite"), std::string::npos);
  const auto infinite = fit_with({.monitor = "score", .patience = 100}, {3, INFINITY});
  EXPECT_EQ(infinite.callback->stopped_epoch(), 1);

  // Without the check, NaN is simply never an improvement.
  const auto tolerated = fit_with({.monitor = "score", .patience = 2, .check_finite = false}, {3, kNaN, kNaN, 1});
  EXPECT_EQ(tolerated.callback->stopped_epoch(), 2);
  EXPECT_DOUBLE_EQ(tolerated.callback->best_score(), 3);
}

TEST(EarlyStopping, AMissingMetricIsAnErrorUnlessNotStrict) {
  try {
    fit_with({.monitor = "val_acc"}, {1});
    FAIL() << "expected a ConfigurationError";
  } catch (const ConfigurationError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'val_acc' was not logged"), std::string::npos) << message;
    EXPECT_NE(message.find("score"), std::string::npos) << "lists what is available: " << message;
  }
  const auto lenient = fit_with({.monitor = "val_acc", .strict = false}, {1}, 3);
  EXPECT_EQ(lenient.epochs_run, 3);
  EXPECT_EQ(lenient.callback->stopped_epoch(), -1);
}

TEST(EarlyStopping, OptionsAreValidated) {
  EXPECT_THROW(EarlyStopping({}), ConfigurationError);
  EXPECT_THROW(EarlyStopping({.monitor = "x", .min_delta = -1}), ConfigurationError);
  EXPECT_THROW(EarlyStopping({.monitor = "x", .patience = -1}), ConfigurationError);
  EXPECT_THROW(callback_registry().create("early_stopping:monitor=x,mode=up"), ConfigurationError);
  auto built = std::dynamic_pointer_cast<EarlyStopping>(
      callback_registry().create("early_stopping:monitor=val_acc,mode=max,patience=5,stopping_threshold=0.99"));
  ASSERT_NE(built, nullptr);
  EXPECT_EQ(built->options().patience, 5);
  EXPECT_EQ(built->options().mode, MonitorMode::Max);
  EXPECT_EQ(built->options().stopping_threshold, 0.99);
  EXPECT_FALSE(built->options().divergence_threshold.has_value());
}

TEST(EarlyStopping, TheDecisionIsRankZerosThroughTheStrategy) {
  // Locally the callback wants to stop at epoch 1 (patience 0), but rank 0 says no.
  auto keep_going = std::make_shared<FixedDecisionStrategy>(false);
  const auto overruled = fit_with({.monitor = "score", .patience = 0}, {1, 2, 3}, 4, keep_going);
  EXPECT_EQ(overruled.epochs_run, 4);
  EXPECT_EQ(overruled.callback->stopped_epoch(), -1);
  EXPECT_EQ(keep_going->calls(), 4) << "one broadcast per check";
  // And when rank 0 decides to stop, this rank stops even though its own metric improves.
  auto stop = std::make_shared<FixedDecisionStrategy>(true);
  const auto stopped = fit_with({.monitor = "score", .patience = 3}, {3, 2, 1}, 4, stop);
  EXPECT_EQ(stopped.epochs_run, 1);
}

TEST(EarlyStopping, ChecksAfterEachValidationWhenValidationRunsMoreThanOncePerEpoch) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 5;
  options.val_check_interval = BatchLimit::fraction(0.5);  // two validations per epoch
  auto callback = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "score", .patience = 2});
  Trainer trainer(options);
  trainer.add_callback(callback);
  // Best at epoch 0's first validation; no improvement at its second nor at epoch 1's first, where
  // the fit stops in the middle of the epoch.
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1, 2}), std::make_shared<RegressionData>(32, 8, false, 0, 8));
  EXPECT_EQ(callback->stopped_epoch(), 1);
  EXPECT_EQ(trainer.global_step(), 4 + 2) << "4 steps in epoch 0, then 2 up to the mid-epoch validation";
}

TEST(EarlyStopping, StateRoundTripsThroughStateDict) {
  const auto out = fit_with({.monitor = "score", .patience = 2}, {5, 4, 4.5, 4.2});
  EarlyStopping restored({.monitor = "score", .patience = 2});
  restored.load_state_dict(out.callback->state_dict());
  EXPECT_EQ(restored.wait_count(), out.callback->wait_count());
  EXPECT_EQ(restored.stopped_epoch(), out.callback->stopped_epoch());
  EXPECT_DOUBLE_EQ(restored.best_score(), 4);
}

TEST(EarlyStopping, TwoInstancesKeepTheirOwnStateInOneCheckpoint) {
  TemporaryDirectory dir;
  const ModelCheckpointOptions last_only{.dirpath = dir.file("ckpt"), .save_top_k = 0, .save_last = true};
  // Scores 3, 2, 4, then 3.5 after the resume. Min: best 2, wait 1 after epoch 2, wait 2 after
  // epoch 3. Max: best 4, wait 0 after epoch 2, wait 1 after epoch 3. Instances that did not get
  // their own state back would see 3.5 as a first, best value (wait 0).
  auto fit_to = [&](int64_t epochs, const std::string& ckpt_path) {
    auto options = quiet_options(dir.path());
    options.max_epochs = epochs;
    auto min = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "score", .patience = 10});
    auto max = std::make_shared<EarlyStopping>(
        EarlyStoppingOptions{.monitor = "score", .patience = 10, .mode = MonitorMode::Max});
    Trainer trainer(options);
    trainer.add_callback(min);
    trainer.add_callback(max);
    trainer.add_callback(std::make_shared<ModelCheckpoint>(last_only));
    trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{3, 2, 4, 3.5}),
                std::make_shared<RegressionData>(16, 8, false, 0, 8), ckpt_path);
    return std::make_pair(min, max);
  };
  fit_to(3, "");
  const StateDict saved = read_checkpoint_file(dir.file("ckpt/last.ckpt"));
  const StateDict states = saved.child("callbacks");
  const StateDict min_state = states.child("EarlyStopping{monitor=score,mode=min}");
  const StateDict max_state = states.child("EarlyStopping{monitor=score,mode=max}");
  EXPECT_EQ(min_state.get_int("wait_count"), 1);
  EXPECT_DOUBLE_EQ(min_state.get_double("best_score"), 2);
  EXPECT_EQ(max_state.get_int("wait_count"), 0);
  EXPECT_DOUBLE_EQ(max_state.get_double("best_score"), 4);

  const auto [min, max] = fit_to(4, dir.file("ckpt/last.ckpt"));
  EXPECT_EQ(min->wait_count(), 2);
  EXPECT_DOUBLE_EQ(min->best_score(), 2);
  EXPECT_EQ(max->wait_count(), 1);
  EXPECT_DOUBLE_EQ(max->best_score(), 4);
}

}  // namespace
}  // namespace volt::testing
