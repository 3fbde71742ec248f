// GradientAccumulationScheduler: accumulation factors by epoch, identical to the fixed option
// where they agree, and clear errors for bad schedules and conflicts.
#include <gtest/gtest.h>

#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

using Schedule = std::map<int64_t, int64_t>;

struct Result {
  torch::Tensor weights;
  int64_t steps;
};

Result train(std::shared_ptr<Callback> callback, int64_t accumulate, int64_t epochs) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = epochs;
  options.accumulate_grad_batches = accumulate;
  torch::manual_seed(0);
  auto model = std::make_shared<RegressionModule>(RegressionOptions{.adam = true});
  Trainer trainer(options);
  if (callback) trainer.add_callback(callback);
  trainer.fit(model, std::make_shared<RegressionData>(64, 8));  // 8 micro-batches per epoch
  return {model->flat_parameters(), trainer.global_step()};
}

TEST(GradientAccumulationScheduler, ChangesTheFactorAtTheScheduledEpochs) {
  auto scheduler = std::make_shared<GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{1, 2}, {2, 4}});
  EXPECT_EQ(scheduler->factor_for_epoch(0), 1) << "before the first key: 1";
  EXPECT_EQ(scheduler->factor_for_epoch(1), 2);
  EXPECT_EQ(scheduler->factor_for_epoch(7), 4);
  EXPECT_EQ(train(scheduler, 1, 4).steps, 8 + 4 + 2 + 2);
}

TEST(GradientAccumulationScheduler, AConstantScheduleTrainsExactlyLikeTheOption) {
  auto scheduler = std::make_shared<GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{0, 4}});
  const auto scheduled = train(scheduler, 1, 2);
  const auto fixed = train(nullptr, 4, 2);
  EXPECT_EQ(scheduled.steps, 4);
  EXPECT_TRUE(torch::equal(scheduled.weights, fixed.weights));
}

TEST(GradientAccumulationScheduler, ParsesTheCommandLineForm) {
  EXPECT_EQ(GradientAccumulationScheduler::parse("0:8;4:4; 8:1"), (std::map<int64_t, int64_t>{{0, 8}, {4, 4}, {8, 1}}));
  EXPECT_THROW(GradientAccumulationScheduler::parse("0-8"), ConfigurationError);
  EXPECT_THROW(GradientAccumulationScheduler::parse("0:8;0:4"), ConfigurationError);
  EXPECT_THROW(GradientAccumulationScheduler::parse("0:8x"), ConfigurationError);
  EXPECT_THROW((GradientAccumulationScheduler{Schedule{}}), ConfigurationError);
  EXPECT_THROW((GradientAccumulationScheduler{Schedule{{0, 0}}}), ConfigurationError);
  EXPECT_THROW((GradientAccumulationScheduler{Schedule{{-1, 2}}}), ConfigurationError);
  auto built = std::dynamic_pointer_cast<GradientAccumulationScheduler>(
      callback_registry().create("gradient_accumulation_scheduler:scheduling=0:2;3:1"));
  ASSERT_NE(built, nullptr);
  EXPECT_EQ(built->scheduling(), (std::map<int64_t, int64_t>{{0, 2}, {3, 1}}));
}

TEST(GradientAccumulationScheduler, ConflictsWithTheTrainerOptionAndMidEpochChanges) {
  auto scheduler = std::make_shared<GradientAccumulationScheduler>(std::map<int64_t, int64_t>{{0, 2}});
  EXPECT_THROW(train(scheduler, 2, 1), ConfigurationError);

  class MidEpochChange : public Callback {
    void on_train_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch&, int64_t b) override {
      if (b == 2) trainer.set_accumulate_grad_batches(3);
    }
  };
  EXPECT_THROW(train(std::make_shared<MidEpochChange>(), 1, 1), ConfigurationError);
}

}  // namespace
}  // namespace volt::testing
