// Mixed precision inside the Trainer: a GradScaler-skipped step leaves the parameters exactly as
// a control run that skipped that step (also with accumulation, clipping and a cross-rank skip
// decision), does not advance a step-interval LR scheduler, is counted, and amp_scale /
// amp_skipped_steps reach the loggers. Every run uses bf16 autocast on the CPU; the scaled and
// control runs differ only in the scaler, and power-of-two scaling is exact in bfloat16.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "strategies/single_device_strategy.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"
#include "precision/mixed_precision.h"

namespace volt::testing {
namespace {

// Poisons a gradient element after the backward of the batches in `inject`.
class InjectingModule : public RegressionModule {
 public:
  InjectingModule(RegressionOptions options, std::set<int64_t> inject)
      : RegressionModule(std::move(options)), inject_(std::move(inject)) {}
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    batch_idx_ = batch_idx;
    return RegressionModule::training_step(batch, batch_idx);
  }
  void on_after_backward() override {
    if (inject_.count(batch_idx_)) linear->weight.mutable_grad().view(-1)[0].fill_(std::numeric_limits<float>::infinity());
  }

 private:
  std::set<int64_t> inject_;
  int64_t batch_idx_ = -1;
};

// InjectingModule stepping itself (manual optimization), as README's pattern does: backward,
// clipping by hand, the step, and the scheduler only after a step the GradScaler took.
class ManualInjectingModule : public InjectingModule {
 public:
  ManualInjectingModule(RegressionOptions options, std::set<int64_t> inject, std::optional<double> clip,
                        GradientClipAlgorithm algorithm)
      : InjectingModule(std::move(options), std::move(inject)), clip_(clip), algorithm_(algorithm) {}
  bool automatic_optimization() const override { return false; }
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    auto loss = InjectingModule::training_step(batch, batch_idx);
    auto& opt = optimizer();
    manual_backward(loss);
    if (clip_) clip_gradients(opt, *clip_, algorithm_);
    if (opt.step()) lr_schedulers().at(0)->step();
    opt.zero_grad();
    return loss;
  }

 private:
  std::optional<double> clip_;
  GradientClipAlgorithm algorithm_;
};

class CapturingLogger : public Logger {
 public:
  std::string name() const override { return "capture"; }
  int64_t version() const override { return 0; }
  std::string log_dir() const override { return "."; }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
    if (metrics.count("amp_scale")) rows.push_back(metrics);
  }
  void log_hyperparams(const Hyperparameters&) override {}
  std::vector<std::map<std::string, double>> rows;
};

// A strategy whose Max all-reduce (the scaler's found-inf reduction) reports inf on chosen calls,
// as if another rank had seen one.
class OtherRankInfStrategy : public SingleDeviceStrategy {
 public:
  explicit OtherRankInfStrategy(std::set<int64_t> report_on_calls)
      : reports_(std::make_shared<Reports>(std::move(report_on_calls))) {
    hold(reports_);
  }
  int64_t max_calls() const { return reports_->max_calls; }

 private:
  struct Reports : StrategyCollectives {
    explicit Reports(std::set<int64_t> calls) : report(std::move(calls)) {}
    torch::Tensor all_reduce(const torch::Tensor& value, ReduceOp op) override {
      if (op != ReduceOp::Max) return value;
      return report.count(max_calls++) ? torch::ones_like(value) : value;
    }
    std::set<int64_t> report;
    int64_t max_calls = 0;
  };
  std::shared_ptr<Reports> reports_;
};

struct RunOptions {
  std::set<int64_t> inject;                // batches whose gradients get an inf
  std::set<int64_t> skip;                  // batches that return no loss (the control's skipped steps)
  bool scaler = true;
  GradScalerOptions scaler_options{.growth_interval = 2};
  int64_t accumulate = 1;
  std::optional<double> clip;
  GradientClipAlgorithm clip_algorithm = GradientClipAlgorithm::Norm;
  std::shared_ptr<Strategy> strategy;      // null: single_device
  int64_t epochs = 1;
  std::string resume_from;                 // a checkpoint to resume from
  std::string save_to;                     // where to save a checkpoint after fit
  bool manual = false;                     // ManualInjectingModule: clip applies by hand
};

struct RunResult {
  torch::Tensor parameters;
  double lr = 0;
  int64_t global_step = 0;
  int64_t optimizer_steps = 0;  // on_before_optimizer_step calls
  std::shared_ptr<MixedPrecision> precision;
  std::vector<std::map<std::string, double>> logged;
};

RunResult train(const RunOptions& run) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = run.epochs;
  options.precision = "bf16-mixed";
  options.log_every_n_steps = 1;
  options.accumulate_grad_batches = run.accumulate;
  if (!run.manual) options.gradient_clip_val = run.clip;
  options.gradient_clip_algorithm = run.clip_algorithm;
  auto precision = std::make_shared<MixedPrecision>(
      torch::kBFloat16, torch::kCPU, run.scaler ? std::make_shared<GradScaler>(run.scaler_options) : nullptr);
  RegressionOptions model_options{.step_scheduler = true};
  if (!run.skip.empty()) model_options.skip_batch = [skip = run.skip](int64_t b) { return skip.count(b) > 0; };
  torch::manual_seed(0);
  auto model = run.manual ? std::make_shared<ManualInjectingModule>(model_options, run.inject, run.clip,
                                                                    run.clip_algorithm)
                         : std::make_shared<InjectingModule>(model_options, run.inject);
  Trainer trainer(options, run.strategy, precision);
  auto logger = std::make_shared<CapturingLogger>();
  trainer.add_logger(logger);
  trainer.fit(model, std::make_shared<RegressionData>(64, 8), run.resume_from);  // 8 batches an epoch
  if (!run.save_to.empty()) trainer.save_checkpoint(run.save_to);
  return {model->flat_parameters(), trainer.optimizers()[0]->param_groups()[0].options().get_lr(),
          trainer.global_step(), model->optimizer_steps, precision, logger->rows};
}

void expect_same_parameters(const RunResult& control, const RunResult& scaled) {
  EXPECT_TRUE(torch::allclose(control.parameters, scaled.parameters, 1e-5, 1e-7))
      << "max difference " << (control.parameters - scaled.parameters).abs().max().item<double>();
}

TEST(AmpTrainer, SkippedStepsLeaveParametersAsAControlThatSkippedThemAndHoldTheScheduler) {
  const auto control = train({.skip = {2, 5}, .scaler = false});
  const auto scaled = train({.inject = {2, 5}});
  expect_same_parameters(control, scaled);
  // StepLR(gamma 0.5) per step: advanced by the 6 steps taken, not by the 2 skipped ones.
  EXPECT_DOUBLE_EQ(control.lr, 0.05 * std::pow(0.5, 6));
  EXPECT_DOUBLE_EQ(scaled.lr, 0.05 * std::pow(0.5, 6));
  EXPECT_EQ(control.global_step, 6);
  EXPECT_EQ(scaled.global_step, 8) << "global_step counts windows, skipped ones included";
  EXPECT_EQ(scaled.precision->scaler()->skipped_steps(), 2);
  // Interval 2 with infs at 2 and 5: grow after 1, back off at 2, grow after 4, back off at 5,
  // grow after 7 → init × 2³ × 0.5².
  EXPECT_EQ(scaled.precision->scaler()->get_scale(), 65536.0 * 8 * 0.25);
}

TEST(AmpTrainer, ScaleAndSkippedStepCountAreLoggedEveryLoggedStep) {
  const auto scaled = train({.inject = {2, 5}});
  ASSERT_EQ(scaled.logged.size(), 8u);
  const std::vector<double> scales{65536, 131072, 65536, 65536, 131072, 65536, 65536, 131072};
  const std::vector<double> skipped{0, 0, 1, 1, 1, 2, 2, 2};
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(scaled.logged[i].at("amp_scale"), scales[i]) << "step " << i + 1;
    EXPECT_EQ(scaled.logged[i].at("amp_skipped_steps"), skipped[i]) << "step " << i + 1;
    EXPECT_TRUE(scaled.logged[i].count("train_loss"));
  }
  const auto plain = train({.scaler = false});
  EXPECT_TRUE(plain.logged.empty()) << "bf16-mixed without a scaler logs no amp_* metrics";
}

TEST(AmpTrainer, WithAccumulationAnInfInAnyMicroBatchSkipsItsWindow) {
  // Windows of 2: batches {2,3} and {4,5} form windows 1 and 2. The inf comes in the second
  // micro-batch of window 1 and in the first of window 2 (which the next backward must not hide).
  const auto control = train({.skip = {2, 3, 4, 5}, .scaler = false, .accumulate = 2});
  const auto scaled = train({.inject = {3, 4}, .accumulate = 2});
  expect_same_parameters(control, scaled);
  EXPECT_EQ(scaled.precision->scaler()->skipped_steps(), 2);
  EXPECT_EQ(scaled.global_step, 4);
  EXPECT_DOUBLE_EQ(scaled.lr, 0.05 * std::pow(0.5, 2));
}

TEST(AmpTrainer, ClippingSeesUnscaledGradients) {
  for (auto algorithm : {GradientClipAlgorithm::Norm, GradientClipAlgorithm::Value}) {
    const double clip = 0.01;
    const auto control = train({.skip = {3}, .scaler = false, .clip = clip, .clip_algorithm = algorithm});
    const auto scaled = train({.inject = {3}, .clip = clip, .clip_algorithm = algorithm});
    expect_same_parameters(control, scaled);
    // Clipping is active at this threshold: without it the result differs.
    const auto unclipped = train({.inject = {3}});
    EXPECT_FALSE(torch::allclose(unclipped.parameters, scaled.parameters, 1e-5, 1e-7));
  }
}

TEST(AmpTrainer, ManualOptimizationSkipsUnscalesOnceAndClipsLikeTheAutomaticLoop) {
  // An inf at batch 3: ManualOptimizer::step returns false there and the module holds its
  // scheduler. clip_gradients unscales, and step must not unscale again: gradients divided twice
  // by the scale (2^16) would train differently from the automatic loop's clipping.
  for (const std::optional<double> clip : {std::optional<double>(), std::optional<double>(0.01)}) {
    const std::string what = clip ? "clipping by hand at 0.01" : "without clipping";
    const auto automatic = train({.inject = {3}, .clip = clip});
    const auto manual = train({.inject = {3}, .clip = clip, .manual = true});
    EXPECT_TRUE(torch::equal(manual.parameters, automatic.parameters))
        << what << ": max difference " << (manual.parameters - automatic.parameters).abs().max().item<double>();
    EXPECT_EQ(manual.precision->scaler()->skipped_steps(), 1) << what;
    EXPECT_EQ(manual.precision->scaler()->get_scale(), automatic.precision->scaler()->get_scale()) << what;
    EXPECT_EQ(manual.global_step, 8) << what << ": a skipped step counts, as in the automatic loop";
    EXPECT_EQ(manual.optimizer_steps, 8) << what << ": on_before_optimizer_step runs before the skip is known";
    EXPECT_DOUBLE_EQ(manual.lr, automatic.lr) << what << ": the scheduler held for the skipped step";
  }
}

TEST(AmpTrainer, AnInfReportedByAnotherRankSkipsTheStepHere) {
  // The strategy's all_reduce(Max) is the scaler's reducer (Strategy::set_precision): its third
  // call (batch 2) reports inf although the local gradients are finite.
  auto strategy = std::make_shared<OtherRankInfStrategy>(std::set<int64_t>{2});
  const auto control = train({.skip = {2}, .scaler = false});
  const auto scaled = train({.strategy = strategy});
  expect_same_parameters(control, scaled);
  EXPECT_EQ(strategy->max_calls(), 8) << "one found-inf reduction per optimizer step";
  EXPECT_EQ(scaled.precision->scaler()->skipped_steps(), 1);
  EXPECT_EQ(scaled.optimizer_steps, 8) << "the hooks and clipping still ran before the skipped step";
}

TEST(AmpTrainer, ScalerStateTravelsThroughACheckpoint) {
  // Two epochs in one go, against one epoch, a checkpoint, and a resumed second epoch with a
  // fresh scaler: the scale, its growth tracker and the skip count must carry over exactly.
  // Interval 3 leaves the growth tracker at 2 when epoch 1 ends, so the resumed run's first step
  // grows the scale only if the tracker was restored.
  TemporaryDirectory dir;
  const GradScalerOptions scaler{.growth_interval = 3};
  const auto uninterrupted = train({.inject = {2, 5}, .scaler_options = scaler, .epochs = 2});
  const auto first = train({.inject = {2, 5}, .scaler_options = scaler, .save_to = dir.file("epoch1.ckpt")});
  EXPECT_EQ(first.precision->scaler()->growth_tracker(), 2);
  const auto resumed = train({.inject = {2, 5}, .scaler_options = {}, .epochs = 2, .resume_from = dir.file("epoch1.ckpt")});
  expect_same_parameters(uninterrupted, resumed);
  const auto& a = *uninterrupted.precision->scaler();
  const auto& b = *resumed.precision->scaler();
  EXPECT_EQ(b.get_scale(), a.get_scale());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  EXPECT_EQ(b.skipped_steps(), 4);
  EXPECT_EQ(a.skipped_steps(), 4);
  EXPECT_DOUBLE_EQ(resumed.lr, uninterrupted.lr);
}

// Two linear layers with an optimizer and a step scheduler each.
class TwoOptimizerModule : public Module {
 public:
  TwoOptimizerModule() {
    torch::manual_seed(0);
    first = register_module("first", torch::nn::Linear(8, 1));
    second = register_module("second", torch::nn::Linear(8, 1));
  }
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    batch_idx_ = batch_idx;
    return torch::mse_loss(first->forward(batch.input) + second->forward(batch.input), batch.target);
  }
  void on_after_backward() override {
    if (batch_idx_ == 2) second->weight.mutable_grad().view(-1)[0].fill_(std::nan(""));
  }
  OptimizerConfig configure_optimizers() override {
    OptimizerConfig config;
    for (auto* layer : {&first, &second}) {
      auto optimizer = std::make_shared<torch::optim::SGD>((*layer)->parameters(), 0.05);
      config.optimizers.push_back(optimizer);
      config.schedulers.push_back({std::make_shared<StepLR>(*optimizer, 1, 0.5), SchedulerInterval::Step});
    }
    return config;
  }
  torch::nn::Linear first{nullptr}, second{nullptr};

 private:
  int64_t batch_idx_ = -1;
};

TEST(AmpTrainer, WithTwoOptimizersOnlyTheOneWithTheInfSkips) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 1;
  options.precision = "bf16-mixed";
  auto precision = std::make_shared<MixedPrecision>(torch::kBFloat16, torch::kCPU, std::make_shared<GradScaler>());
  auto model = std::make_shared<TwoOptimizerModule>();
  Trainer trainer(options, nullptr, precision);
  trainer.fit(model, std::make_shared<RegressionData>(32, 8));  // 4 batches
  const auto& optimizers = trainer.optimizers();
  EXPECT_DOUBLE_EQ(optimizers[0]->param_groups()[0].options().get_lr(), 0.05 * std::pow(0.5, 4));
  EXPECT_DOUBLE_EQ(optimizers[1]->param_groups()[0].options().get_lr(), 0.05 * std::pow(0.5, 3))
      << "the second optimizer's scheduler holds for its skipped step";
  EXPECT_EQ(precision->scaler()->skipped_steps(), 1);
  EXPECT_EQ(precision->scaler()->get_scale(), 32768.0) << "one backoff for the iteration";
}

TEST(AmpTrainer, PrecisionObjectMustMatchOptionsAndFloat16MixedNeedsCuda) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  auto bf16 = std::make_shared<MixedPrecision>(torch::kBFloat16, torch::kCPU);
  try {
    Trainer trainer(options, nullptr, bf16);
    FAIL() << "expected ConfigurationError";
  } catch (const ConfigurationError& e) {
    EXPECT_NE(std::string(e.what()).find("set options.precision to 'bf16-mixed'"), std::string::npos) << e.what();
  }
  options.precision = "bf16";  // Lightning's alias
  Trainer accepted(options, nullptr, bf16);
  EXPECT_EQ(&accepted.precision(), bf16.get());
  EXPECT_EQ(&accepted.strategy().precision(), bf16.get());

  options.precision = "16-mixed";
  options.accelerator = "cpu";
  try {
    Trainer trainer(options);
    FAIL() << "expected NotSupportedError";
  } catch (const NotSupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("bf16-mixed"), std::string::npos) << e.what();
  }
}

// The squared error spelled out: LibTorch 1.13 has no bfloat16 CPU kernel for mse_loss.
class ElementwiseMseModule : public RegressionModule {
 public:
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    return (linear->forward(batch.input) - batch.target).pow(2).mean();
  }
};

TEST(AmpTrainer, TruePrecisionsTrainInTheirDtype) {
  auto fit = [](const std::string& precision) {
    TemporaryDirectory dir;
    auto options = quiet_options(dir.path());
    options.max_epochs = 2;
    options.precision = precision;
    torch::manual_seed(0);
    auto model = std::make_shared<ElementwiseMseModule>();
    Trainer trainer(options);
    trainer.fit(model, std::make_shared<RegressionData>(64, 8));
    EXPECT_EQ(trainer.precision().name(), precision);
    return model;
  };
  const auto reference = fit("32-true");
  const auto f64 = fit("64-true");
  const auto bf16_true = fit("bf16-true");
  const auto bf16_mixed = fit("bf16-mixed");
  EXPECT_EQ(f64->linear->weight.scalar_type(), torch::kDouble);
  EXPECT_EQ(bf16_true->linear->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(bf16_mixed->linear->weight.scalar_type(), torch::kFloat) << "mixed keeps float32 weights";
  const auto expected = reference->flat_parameters().to(torch::kDouble);
  EXPECT_TRUE(torch::allclose(f64->flat_parameters(), expected, 0, 1e-5));
  EXPECT_TRUE(torch::allclose(bf16_mixed->flat_parameters().to(torch::kDouble), expected, 0, 3e-2));
  EXPECT_TRUE(torch::allclose(bf16_true->flat_parameters().to(torch::kDouble), expected, 0, 6e-2));
  // The 64-bit run is not the 32-bit one in disguise.
  EXPECT_FALSE(torch::equal(f64->flat_parameters(), expected));
}

}  // namespace
}  // namespace volt::testing
