// Timer: stops fit at a step or epoch boundary once the training budget is spent, continues a
// budget restored from a checkpoint, and decides through the strategy's broadcast.
#include <gtest/gtest.h>

#include "tests/support/test_doubles.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

std::unique_ptr<Trainer> fit_with(std::shared_ptr<Timer> timer, std::shared_ptr<Module> module, int64_t max_epochs,
                                  std::shared_ptr<Strategy> strategy = nullptr) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = max_epochs;
  auto trainer = strategy ? std::make_unique<Trainer>(options, strategy) : std::make_unique<Trainer>(options);
  trainer->add_callback(timer);
  trainer->fit(module, std::make_shared<RegressionData>(32, 8, false, 0, 8));
  return trainer;
}

TEST(Timer, AZeroBudgetStopsAfterTheFirstStepOrEpoch) {
  auto per_step = fit_with(std::make_shared<Timer>("00:00:00:00"), std::make_shared<RegressionModule>(), 10);
  EXPECT_EQ(per_step->global_step(), 1);
  // Note [Interrupted epochs]: the epoch's end hooks ran, but it is not finished: a resumed run
  // continues it at batch 1.
  EXPECT_EQ(per_step->current_epoch(), 0);
  EXPECT_EQ(per_step->fit_progress().next_batch, 1);
  EXPECT_FALSE(per_step->fit_progress().epoch_end_started);
  auto per_epoch = fit_with(std::make_shared<Timer>("00:00:00:00", TimerInterval::Epoch),
                            std::make_shared<RegressionModule>(), 10);
  EXPECT_EQ(per_epoch->global_step(), 4);
  EXPECT_EQ(per_epoch->current_epoch(), 1);
}

TEST(Timer, StopsOnceTheBudgetIsSpent) {
  auto timer = std::make_shared<Timer>("00:00:00:01");
  auto trainer = fit_with(timer, std::make_shared<SlowModule>(std::chrono::milliseconds(50)), 1000);
  // At least 50 ms per step: no more than 21 steps fit in the first second. Only lower bounds on
  // time: a loaded machine makes steps slower (fewer of them), never faster.
  EXPECT_GE(timer->time_elapsed("train"), 1.0);
  EXPECT_LE(trainer->global_step(), 21);
  EXPECT_GE(trainer->global_step(), 1);
  EXPECT_DOUBLE_EQ(timer->time_remaining(), 0.0);
  EXPECT_GT(timer->time_elapsed("validate"), 0.0) << "validation inside fit is timed too";
}

TEST(Timer, ARestoredBudgetContinuesWhereTheCheckpointLeftIt) {
  auto first = std::make_shared<Timer>("00:00:00:01");
  StateDict state;
  StateDict elapsed;
  elapsed.set("train", 0.95);
  elapsed.set("validate", 0.0);
  elapsed.set("test", 0.0);
  state.set("time_elapsed", elapsed);
  first->load_state_dict(state);
  EXPECT_NEAR(first->time_remaining(), 0.05, 1e-9);
  auto trainer = fit_with(first, std::make_shared<SlowModule>(std::chrono::milliseconds(50)), 1000);
  EXPECT_GE(trainer->global_step(), 1);
  EXPECT_LE(trainer->global_step(), 2) << "only 50 ms of the budget were left";
  const double saved = first->state_dict().child("time_elapsed").at("train").toDouble();
  EXPECT_GE(saved, 1.0);
}

TEST(Timer, TheDecisionIsRankZerosThroughTheStrategy) {
  auto strategy = std::make_shared<FixedDecisionStrategy>(false);
  auto trainer = fit_with(std::make_shared<Timer>("00:00:00:00"), std::make_shared<RegressionModule>(), 2, strategy);
  EXPECT_EQ(trainer->global_step(), 8) << "rank 0 said go on";
  EXPECT_EQ(strategy->calls(), 8) << "one broadcast per training batch";
}

TEST(Timer, RejectsMalformedDurations) {
  EXPECT_THROW(Timer("1:00"), ConfigurationError);
  EXPECT_THROW(Timer("00:25:00:00"), ConfigurationError);
  EXPECT_THROW(callback_registry().create("timer"), ConfigurationError) << "duration is required";
  EXPECT_THROW(callback_registry().create("timer:duration=00:00:01:00,interval=hour"), ConfigurationError);
  auto built = std::dynamic_pointer_cast<Timer>(callback_registry().create("timer:duration=01:02:03:04"));
  ASSERT_NE(built, nullptr);
  EXPECT_EQ(built->duration().count(), ((1 * 24 + 2) * 60 + 3) * 60 + 4);
}

}  // namespace
}  // namespace volt::testing
