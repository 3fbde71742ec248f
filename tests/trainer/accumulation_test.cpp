// Gradient accumulation: a window of micro-batches must train exactly like one batch of the
// window's samples, including the last, partial window of an epoch, and only the micro-batch that
// closes a window may synchronize.
#include <gtest/gtest.h>

#include "strategies/single_device_strategy.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// Trains on `samples` with batch `batch_size` and `accumulate` micro-batches per step.
torch::Tensor train(int64_t samples, int64_t batch_size, int64_t accumulate, RegressionOptions model_options = {},
                    int64_t epochs = 1) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = epochs;
  options.accumulate_grad_batches = accumulate;
  torch::manual_seed(0);
  auto model = std::make_shared<RegressionModule>(model_options);
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<RegressionData>(samples, batch_size));
  return model->flat_parameters();
}

TEST(Accumulation, FourMicroBatchesOfEightEqualOneBatchOfThirtyTwo) {
  for (bool adam : {false, true}) {
    const auto accumulated = train(96, 8, 4, {.adam = adam});
    const auto large_batch = train(96, 32, 1, {.adam = adam});
    EXPECT_TRUE(torch::allclose(accumulated, large_batch, /*rtol=*/0, /*atol=*/1e-6))
        << (adam ? "Adam" : "SGD") << ": max difference "
        << (accumulated - large_batch).abs().max().item<double>();
  }
}

TEST(Accumulation, ThePartialLastWindowDividesByItsOwnSize) {
  // 80 samples in batches of 8 with windows of 4: windows of 32, 32 and 16 samples, so the
  // reference is batches of 32 with a last batch of 16 — the mean over the last 16 samples.
  const auto accumulated = train(80, 8, 4, {}, 2);
  const auto reference = train(80, 32, 1, {}, 2);
  EXPECT_TRUE(torch::allclose(accumulated, reference, 0, 1e-6))
      << "max difference " << (accumulated - reference).abs().max().item<double>();
  // Dividing the last window by the full window size (4 micro-batches instead of 2) would halve
  // its gradient: a different result, so the comparison above can tell the two apart.
  const auto wrongly_scaled = train(80, 32, 1, {.loss_weight = [](int64_t b) { return b == 2 ? 0.5 : 1.0; }}, 2);
  EXPECT_FALSE(torch::allclose(accumulated, wrongly_scaled, 0, 1e-6));
}

// Records, for every backward, whether it ran inside the strategy's no-sync scope (issue 21.7:
// counting scopes alone would pass with a loop that opened and closed them around nothing).
class RecordingStrategy : public SingleDeviceStrategy {
 public:
  RecordingStrategy() { hold(std::make_shared<Recorder>(*this)); }
  int no_sync_scopes = 0;
  bool in_no_sync = false;
  int backwards_without_sync = 0, backwards_with_sync = 0;

 private:
  struct Recorder : GradientSynchronization {
    explicit Recorder(RecordingStrategy& owner) : GradientSynchronization(owner), log(owner) {}
    ScopeGuard no_sync() override {
      ++log.no_sync_scopes;
      log.in_no_sync = true;
      return ScopeGuard([this] { log.in_no_sync = false; });
    }
    void pre_backward(const torch::Tensor&) override {
      ++(log.in_no_sync ? log.backwards_without_sync : log.backwards_with_sync);
    }
    RecordingStrategy& log;
  };
};

TEST(Accumulation, OnlyTheMicroBatchThatClosesAWindowSynchronizes) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.accumulate_grad_batches = 4;
  auto strategy = std::make_shared<RecordingStrategy>();
  auto model = std::make_shared<RegressionModule>();
  Trainer trainer(options, strategy);
  trainer.fit(model, std::make_shared<RegressionData>(80, 8));  // 10 micro-batches: windows 4, 4, 2
  EXPECT_EQ(strategy->no_sync_scopes, 3 + 3 + 1);
  EXPECT_EQ(strategy->backwards_without_sync, 3 + 3 + 1) << "the backwards that open a window run inside no_sync";
  EXPECT_EQ(strategy->backwards_with_sync, 3) << "the backward that closes a window synchronizes";
  EXPECT_FALSE(strategy->in_no_sync) << "the scope ends with its micro-batch";
  EXPECT_EQ(trainer.global_step(), 3);
  EXPECT_EQ(model->optimizer_steps, 3);
}

TEST(Accumulation, StepSchedulerAndGlobalStepCountOptimizerSteps) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.accumulate_grad_batches = 2;
  auto model = std::make_shared<RegressionModule>(RegressionOptions{.lr = 0.1, .step_scheduler = true});
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<RegressionData>(64, 8));  // 8 micro-batches → 4 steps
  EXPECT_EQ(trainer.global_step(), 4);
  const auto& group = trainer.optimizers().front()->param_groups().front();
  EXPECT_DOUBLE_EQ(static_cast<const torch::optim::SGDOptions&>(group.options()).lr(), 0.1 * std::pow(0.5, 4));
}

TEST(Accumulation, AnUndefinedLossSkipsBackwardAndAWindowWithoutBackwardSkipsTheStep) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.accumulate_grad_batches = 2;
  // Batches 0–3 are skipped: windows {0,1} and {2,3} take no step; {4,5} and {6,7} do.
  auto model = std::make_shared<RegressionModule>(RegressionOptions{.skip_batch = [](int64_t b) { return b < 4; }});
  const auto before = model->flat_parameters().clone();
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<RegressionData>(64, 8));
  EXPECT_EQ(model->training_steps, 8);
  EXPECT_EQ(trainer.global_step(), 2);
  EXPECT_EQ(model->optimizer_steps, 2);
  EXPECT_FALSE(torch::equal(before, model->flat_parameters()));
}

TEST(Accumulation, ClippingBoundsTheStepByTheClipValue) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_steps = 1;
  options.gradient_clip_val = 1e-3;
  const double lr = 0.5;
  auto model = std::make_shared<RegressionModule>(RegressionOptions{.lr = lr});
  const auto before = model->flat_parameters().clone();
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<RegressionData>(32, 32));
  // One SGD step moves the parameters by lr × (clipped gradient), whose norm is the clip value.
  const double moved = (model->flat_parameters() - before).norm().item<double>();
  EXPECT_NEAR(moved, lr * 1e-3, 1e-6);
}

}  // namespace
}  // namespace volt::testing
