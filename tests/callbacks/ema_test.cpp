// EMA: the average follows ema ← d·ema + (1−d)·θ after every n-th optimizer step, validation sees
// it and training gets its own weights back (also after a failure), and apply_at_end installs it.
#include <gtest/gtest.h>

#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

// Keeps the trainable parameters after every optimizer step, and what validation saw.
class WeightLog : public Callback {
 public:
  void on_train_batch_end(Trainer& trainer, Module& module, const torch::Tensor&, const Batch&, int64_t) override {
    if (trainer.global_step() != static_cast<int64_t>(after_step.size())) return;  // no step in this batch
    after_step.push_back(static_cast<RegressionModule&>(module).flat_parameters().clone());
  }
  void on_validation_start(Trainer&, Module& module) override {
    before_validation.push_back(static_cast<RegressionModule&>(module).flat_parameters().clone());
  }
  void on_train_epoch_end(Trainer&, Module& module) override {
    at_epoch_end.push_back(static_cast<RegressionModule&>(module).flat_parameters().clone());
  }
  std::vector<torch::Tensor> after_step{torch::Tensor()};  // index = global step; step 0 unused
  std::vector<torch::Tensor> before_validation, at_epoch_end;
};

class ValidationSnapshots : public RegressionModule {
 public:
  void validation_step(const Batch& batch, int64_t batch_idx) override {
    if (fail_in_validation) throw DataError("validation failed");
    if (batch_idx == 0) seen.push_back(flat_parameters().clone());
    RegressionModule::validation_step(batch, batch_idx);
  }
  std::vector<torch::Tensor> seen;
  bool fail_in_validation = false;
};

torch::Tensor flat(const std::map<std::string, torch::Tensor>& averages) {
  // flat_parameters() order: linear.weight then linear.bias.
  return torch::cat({averages.at("linear.weight").flatten(), averages.at("linear.bias").flatten()});
}

struct EmaFit {
  std::shared_ptr<ValidationSnapshots> model;
  std::shared_ptr<EMA> ema;
  std::shared_ptr<WeightLog> log;
};

EmaFit fit_with(std::shared_ptr<EMA> ema, int64_t epochs = 2) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = epochs;
  torch::manual_seed(0);
  EmaFit run{std::make_shared<ValidationSnapshots>(), ema, std::make_shared<WeightLog>()};
  Trainer trainer(options);
  trainer.add_callback(run.log);  // before the EMA: sees the trained weights at validation start
  trainer.add_callback(ema);
  trainer.fit(run.model, std::make_shared<RegressionData>(32, 8, false, 0, 8));
  return run;
}

TEST(EMA, FollowsTheRecurrenceEveryNSteps) {
  for (int64_t every : {1, 3}) {
    const double decay = 0.8;
    auto run = fit_with(std::make_shared<EMA>(decay, every, true, /*apply_at_end=*/false));
    const auto& steps = run.log->after_step;
    ASSERT_EQ(steps.size(), 9u);  // 8 steps
    torch::Tensor expected;
    int64_t updates = 0;
    for (int64_t s = every; s <= 8; s += every, ++updates) {
      expected = expected.defined() ? decay * expected + (1 - decay) * steps[s] : steps[s].clone();
    }
    EXPECT_EQ(run.ema->num_updates(), updates) << "every " << every;
    EXPECT_TRUE(torch::allclose(flat(run.ema->averages()), expected, 0, 1e-6)) << "every " << every;
    EXPECT_TRUE(torch::equal(run.model->flat_parameters(), steps[8])) << "apply_at_end=false keeps the trained weights";
  }
}

TEST(EMA, ValidationSeesTheAverageAndTrainingGetsItsWeightsBack) {
  const double decay = 0.5;
  auto run = fit_with(std::make_shared<EMA>(decay, 1, true, false));
  const auto& steps = run.log->after_step;
  ASSERT_EQ(run.model->seen.size(), 2u);  // one validation per epoch
  // Epoch 0's validation runs after step 4: the average of steps 1..4.
  auto average = steps[1].clone();
  for (int s = 2; s <= 4; ++s) average = decay * average + (1 - decay) * steps[s];
  EXPECT_TRUE(torch::allclose(run.model->seen[0], average, 0, 1e-6));
  EXPECT_FALSE(torch::allclose(run.model->seen[0], steps[4], 0, 1e-6)) << "the test can tell them apart";
  // After validation the trained weights are back, not the average.
  EXPECT_TRUE(torch::equal(run.log->before_validation[0], steps[4]));
  EXPECT_TRUE(torch::equal(run.log->at_epoch_end[0], steps[4]));
  EXPECT_TRUE(torch::equal(run.model->flat_parameters(), steps[8]));
}

TEST(EMA, WithoutValidateWithEmaValidationSeesTheTrainedWeights) {
  auto run = fit_with(std::make_shared<EMA>(0.5, 1, /*validate_with_ema=*/false, false));
  ASSERT_EQ(run.model->seen.size(), 2u);
  EXPECT_TRUE(torch::equal(run.model->seen[0], run.log->after_step[4]));
}

TEST(EMA, ApplyAtEndInstallsTheAverage) {
  auto run = fit_with(std::make_shared<EMA>(0.9, 1, true, /*apply_at_end=*/true));
  EXPECT_TRUE(torch::allclose(run.model->flat_parameters(), flat(run.ema->averages()), 0, 0));
  EXPECT_FALSE(torch::allclose(run.model->flat_parameters(), run.log->after_step[8], 0, 1e-6));
}

TEST(EMA, AFailedValidationRestoresTheTrainedWeights) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  auto model = std::make_shared<ValidationSnapshots>();
  model->fail_in_validation = true;
  auto log = std::make_shared<WeightLog>();
  Trainer trainer(options);
  trainer.add_callback(log);
  trainer.add_callback(std::make_shared<EMA>(0.5, 1, true, true));
  EXPECT_THROW(trainer.fit(model, std::make_shared<RegressionData>(32, 8, false, 0, 8)), DataError);
  EXPECT_TRUE(torch::equal(model->flat_parameters(), log->after_step[4]));
}

TEST(EMA, StateRoundTripsAndOptionsAreChecked) {
  auto run = fit_with(std::make_shared<EMA>(0.7, 2, true, false));
  EMA restored(0.7, 2);
  restored.load_state_dict(run.ema->state_dict());
  EXPECT_EQ(restored.num_updates(), run.ema->num_updates());
  EXPECT_TRUE(torch::equal(flat(restored.averages()), flat(run.ema->averages())));
  EXPECT_THROW(EMA(1.5), ConfigurationError);
  EXPECT_THROW(EMA(0.9, 0), ConfigurationError);
  EXPECT_NE(std::dynamic_pointer_cast<EMA>(callback_registry().create("ema:decay=0.99,update_every_n_steps=4")), nullptr);
}

}  // namespace
}  // namespace volt::testing
