// Manual optimization (issue 20): a module whose automatic_optimization() is false runs backward,
// steps, zeroes, clips and steps its schedulers itself, through the same strategy and precision
// calls as the automatic loop. Oracles: hand-written LibTorch loops and the automatic loop.
#include <gtest/gtest.h>

#include "tests/support/recording_logger.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

constexpr int64_t kFeatures = 8;

// Two sub-models trained by two optimizers, GAN-style: `first` on the composite's loss with the
// second frozen (toggle_model), then `second` on its own loss from the first's detached output.
class TwoOptimizers : public Module {
 public:
  TwoOptimizers() {
    first = register_module("first", torch::nn::Linear(kFeatures, 4));
    second = register_module("second", torch::nn::Linear(4, 1));
  }
  bool automatic_optimization() const override { return false; }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    auto& first_opt = optimizer(0);
    auto& second_opt = optimizer(1);
    torch::Tensor first_loss;
    {
      auto scope = first_opt.toggle_model();
      first_loss = (second(first(batch.input)) - batch.target).pow(2).mean();
      manual_backward(first_loss);
      second_frozen_during_first &= !second->weight.grad().defined();
    }
    first_opt.step();
    first_opt.zero_grad();
    {
      auto scope = second_opt.toggle_model();
      manual_backward((second(first(batch.input).detach()) - batch.target).pow(2).mean());
    }
    second_opt.step();
    second_opt.zero_grad();
    lr_schedulers().at(0)->step();
    second_requires_grad_after &= second->weight.requires_grad();
    log("first_loss", first_loss);
    return first_loss;  // logged, not backpropagated
  }
  OptimizerConfig configure_optimizers() override {
    auto first_opt = std::make_shared<torch::optim::SGD>(first->parameters(), torch::optim::SGDOptions(0.05));
    auto second_opt = std::make_shared<torch::optim::SGD>(second->parameters(), torch::optim::SGDOptions(0.1));
    OptimizerConfig config;
    config.optimizers = {first_opt, second_opt};
    config.schedulers = {SchedulerConfig(std::make_shared<StepLR>(*second_opt, 2, 0.5), SchedulerInterval::Step)};
    return config;
  }
  torch::Tensor flat_parameters() const {
    std::vector<torch::Tensor> flat;
    for (const auto& p : parameters()) flat.push_back(p.detach().flatten());
    return torch::cat(flat);
  }

  torch::nn::Linear first{nullptr}, second{nullptr};
  bool second_frozen_during_first = true;
  bool second_requires_grad_after = true;
};

TEST(ManualOptimization, TwoOptimizersStepLikeAHandWrittenLoop) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 2;
  torch::manual_seed(0);
  auto module = std::make_shared<TwoOptimizers>();
  torch::manual_seed(0);
  TwoOptimizers reference;
  Trainer trainer(options);
  auto data = std::make_shared<RegressionData>(48, 8);
  trainer.fit(module, data);

  // The same computations without a framework.
  torch::optim::SGD first_opt(reference.first->parameters(), torch::optim::SGDOptions(0.05));
  torch::optim::SGD second_opt(reference.second->parameters(), torch::optim::SGDOptions(0.1));
  StepLR schedule(second_opt, 2, 0.5);
  auto loader = data->train_dataloader();
  auto clear = [](torch::optim::Optimizer& o) {  // set to none, as the strategy does
    for (auto& group : o.param_groups()) {
      for (auto& p : group.params()) p.mutable_grad().reset();
    }
  };
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int64_t i = 0; i < loader->num_batches(); ++i) {
      const auto batch = loader->batch(i);
      for (auto& p : reference.second->parameters()) p.set_requires_grad(false);
      (reference.second(reference.first(batch.input)) - batch.target).pow(2).mean().backward();
      for (auto& p : reference.second->parameters()) p.set_requires_grad(true);
      first_opt.step();
      clear(first_opt);
      (reference.second(reference.first(batch.input).detach()) - batch.target).pow(2).mean().backward();
      second_opt.step();
      clear(second_opt);
      schedule.step();
    }
  }
  EXPECT_TRUE(torch::equal(module->flat_parameters(), reference.flat_parameters()))
      << "max difference " << (module->flat_parameters() - reference.flat_parameters()).abs().max().item<double>();
  EXPECT_TRUE(module->second_frozen_during_first) << "toggle_model left the other optimizer's parameters trainable";
  EXPECT_TRUE(module->second_requires_grad_after) << "toggle_model did not restore requires_grad";
  // Lightning's count: every optimizer's step is a global step.
  EXPECT_EQ(trainer.global_step(), 2 * 2 * loader->num_batches());
  EXPECT_DOUBLE_EQ(trainer.optimizers().at(1)->param_groups().at(0).options().get_lr(),
                   second_opt.param_groups().at(0).options().get_lr());
  EXPECT_TRUE(trainer.callback_metrics().count("first_loss"));
}

TEST(ManualOptimization, LogEveryNStepsCountsEveryOptimizersStep) {
  // Two steps a batch: global_step is 2, 4, ..., 12 after the 6 batches. With
  // --log-every-n-steps 3 a row is written after the batch whose steps reach a multiple of 3
  // (steps 4, 6, 10, 12), at the global step. Lightning counts batches that stepped instead
  // (rows at batches 3 and 6; docs/training_loop.md says so).
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.log_every_n_steps = 3;
  Trainer trainer(options);
  auto recorder = std::make_shared<RecordingLogger>();
  trainer.add_logger(recorder);
  trainer.fit(std::make_shared<TwoOptimizers>(), std::make_shared<RegressionData>(48, 8));
  EXPECT_EQ(trainer.global_step(), 12);
  std::vector<int64_t> steps;
  for (const auto& [step, loss] : recorder->series("first_loss")) steps.push_back(step);
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 6, 10, 12}));
}

TEST(ManualOptimization, MaxStepsCountsEveryOptimizersStep) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_steps = 4;
  auto module = std::make_shared<TwoOptimizers>();
  Trainer trainer(options);
  trainer.fit(module, std::make_shared<RegressionData>(48, 8));
  EXPECT_EQ(trainer.global_step(), 4);
  EXPECT_EQ(trainer.current_epoch(), 0) << "two batches of two steps each, then the fit stops";
}

// The regression module stepping itself, clipping by hand: what --gradient-clip-val does.
class ManualRegression : public RegressionModule {
 public:
  explicit ManualRegression(std::optional<double> clip) : RegressionModule({.momentum = 0.9}), clip_(clip) {}
  bool automatic_optimization() const override { return false; }
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    auto loss = RegressionModule::training_step(batch, batch_idx);
    auto& opt = optimizer();
    manual_backward(loss);
    if (clip_) norms.push_back(clip_gradients(opt, *clip_).item<double>());
    stepped_all &= opt.step();
    opt.zero_grad();
    return loss;
  }
  std::vector<double> norms;
  bool stepped_all = true;

 private:
  std::optional<double> clip_;
};

TEST(ManualOptimization, ClippingByHandEqualsTheTrainersClipping) {
  auto train = [](bool manual) {
    TemporaryDirectory dir;
    auto options = quiet_options(dir.path());
    options.max_epochs = 2;
    if (!manual) options.gradient_clip_val = 0.1;
    torch::manual_seed(0);
    std::shared_ptr<RegressionModule> module =
        manual ? std::make_shared<ManualRegression>(0.1) : std::make_shared<RegressionModule>(RegressionOptions{.momentum = 0.9});
    Trainer trainer(options);
    trainer.fit(module, std::make_shared<RegressionData>(48, 8));
    if (manual) {
      const auto& m = static_cast<ManualRegression&>(*module);
      EXPECT_EQ(m.norms.size(), 12u);
      EXPECT_TRUE(m.stepped_all);
      EXPECT_GT(*std::max_element(m.norms.begin(), m.norms.end()), 0.1) << "the clipping never acted";
    }
    EXPECT_EQ(trainer.global_step(), 12);
    return module->flat_parameters();
  };
  const auto automatic = train(false);
  const auto manual = train(true);
  EXPECT_TRUE(torch::equal(manual, automatic)) << "max difference " << (manual - automatic).abs().max().item<double>();
}

TEST(ManualOptimization, WhatOnlyTheOtherModeAllowsIsRefusedWithTheWayOut) {
  auto fit_error = [](std::shared_ptr<Module> module, TrainerOptions options) {
    return configuration_error_of([&] {
      Trainer trainer(options);
      trainer.fit(module, std::make_shared<RegressionData>(16, 8));
    });
  };
  TemporaryDirectory dir;
  auto accumulate = quiet_options(dir.path());
  accumulate.accumulate_grad_batches = 2;
  auto message = fit_error(std::make_shared<ManualRegression>(std::nullopt), accumulate);
  EXPECT_NE(message.find("accumulate_grad_batches=2"), std::string::npos) << message;
  EXPECT_NE(message.find("toggle_model(false)"), std::string::npos) << message;

  auto clip = quiet_options(dir.path());
  clip.gradient_clip_val = 1.0;
  message = fit_error(std::make_shared<ManualRegression>(std::nullopt), clip);
  EXPECT_NE(message.find("--gradient-clip-val"), std::string::npos) << message;
  EXPECT_NE(message.find("clip_gradients(optimizer, value)"), std::string::npos) << message;

  // An automatic module that reaches for the manual calls.
  struct Automatic : RegressionModule {
    explicit Automatic(int what) : what_(what) {}
    torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
      auto loss = RegressionModule::training_step(batch, batch_idx);
      if (what_ == 0) manual_backward(loss);
      if (what_ == 1) optimizer().step();
      return loss;
    }
    int what_;
  };
  message = fit_error(std::make_shared<Automatic>(0), quiet_options(dir.path()));
  EXPECT_NE(message.find("manual_backward"), std::string::npos) << message;
  EXPECT_NE(message.find("automatic_optimization() to return false"), std::string::npos) << message;
  message = fit_error(std::make_shared<Automatic>(1), quiet_options(dir.path()));
  EXPECT_NE(message.find("ManualOptimizer::step"), std::string::npos) << message;

  // Outside a fit.
  ManualRegression idle(std::nullopt);
  message = configuration_error_of([&] { idle.optimizers(); });
  EXPECT_NE(message.find("only while Trainer::fit"), std::string::npos) << message;
}

}  // namespace
}  // namespace volt::testing
