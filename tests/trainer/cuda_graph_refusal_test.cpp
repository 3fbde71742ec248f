// --cuda-graph refuses, before training, what a captured step cannot hold, with an error that
// names the cause and what to do (Note [The Trainer's captured step]); the Fabric's captured_step
// refuses the same, and without cuda_graph runs its step as written. The captured runs themselves
// need a GPU: tests/cuda/cuda_graph_test.cpp.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "core/in_step_hook_probe.h"
#include "fabric/fabric.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

class ManualRegression : public RegressionModule {
 public:
  using RegressionModule::RegressionModule;
  bool automatic_optimization() const override { return false; }
};

// Fits with --cuda-graph and returns the error's text ("" when fit ran); the module must not
// have trained a single step either way it is refused.
std::string refusal(const std::string& strategy, std::shared_ptr<RegressionModule> model) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.strategy = strategy;
  options.cuda_graph = true;
  options.max_steps = 4;
  Trainer trainer(options);
  try {
    trainer.fit(model, std::make_shared<RegressionData>(64, 8));
  } catch (const NotSupportedError& error) {
    EXPECT_EQ(model->training_steps, 0) << strategy << ": refused before training";
    EXPECT_EQ(trainer.global_step(), 0) << strategy;
    return error.what();
  }
  return "";
}

std::shared_ptr<RegressionModule> fused_model() {
  return std::make_shared<RegressionModule>(RegressionOptions{.fused_adamw = true});
}

void expect_refused(const std::string& error, const std::string& cause) {
  EXPECT_NE(error.find(cause), std::string::npos) << "expected a refusal naming '" << cause << "', got: " << error;
  EXPECT_NE(error.find("--cuda-graph"), std::string::npos) << error;
}

TEST(CudaGraphRefusal, OnTheCpu) {
  expect_refused(refusal("auto", fused_model()), "a captured step runs on a CUDA device, and this run is on cpu");
}

TEST(CudaGraphRefusal, AnOptimizerThatIsNotFusedAdamW) {
  expect_refused(refusal("auto", std::make_shared<RegressionModule>()), "optimizer 0 is not a volt::FusedAdamW");
  expect_refused(refusal("auto", std::make_shared<RegressionModule>(RegressionOptions{.adam = true})),
                 "optimizer 0 is not a volt::FusedAdamW");
}

TEST(CudaGraphRefusal, StrategiesOtherThanSingleDevice) {
  expect_refused(refusal("fsdp", fused_model()), "strategy 'fsdp' is not captured");
  // SlowMo is a DDP underneath; its own step on the host keeps it out, as it does any subclass
  // that renames itself without saying what a graph can hold of its step.
  expect_refused(refusal("slowmo", fused_model()), "strategy 'slowmo' is not captured");
  // ddp failed to capture on NCCL on a GPU (tests/cuda/cuda_graph_test.cpp): refused, with any options.
  for (const std::string ddp : {"ddp", "ddp:static_graph=true", "ddp_find_unused_parameters_true"}) {
    expect_refused(refusal(ddp, fused_model()), "its bucket all-reduce on NCCL failed to capture on a GPU");
  }
}

TEST(CudaGraphRefusal, ManualOptimization) {
  expect_refused(refusal("auto", std::make_shared<ManualRegression>(RegressionOptions{.fused_adamw = true})),
                 "manual optimization");
}

TEST(CudaGraphRefusal, TheFlagAndTheConfigKeySetIt) {
  const char* argv[] = {"prog", "--cuda-graph"};
  EXPECT_TRUE(TrainerOptions::from_args(2, argv).cuda_graph);
  const char* off[] = {"prog"};
  EXPECT_FALSE(TrainerOptions::from_args(1, off).cuda_graph);
  EXPECT_TRUE(TrainerOptions::from_args(2, argv).run_options().cuda_graph);
  TemporaryDirectory dir;
  std::ofstream(dir.file("run.ini")) << "cuda-graph = true\n";
  EXPECT_TRUE(options_from_args({"--config", dir.file("run.ini")}).cuda_graph) << "the config file's key";
  EXPECT_FALSE(options_from_args({"--config", dir.file("run.ini"), "--cuda-graph=false"}).cuda_graph)
      << "the command line wins over the file";
}

// Note [Hooks inside a captured phase]: the loop calls every in-step hook through the probe, and
// no built-in callback overrides one (else --cuda-graph would keep every step eager).
class GradientWatcher : public Callback {
 public:
  std::string state_key() const override { return "GradientWatcher"; }
  void on_after_backward(Trainer&, Module&) override { ++calls; }
  int64_t calls = 0;
};

TEST(CudaGraphRefusal, TheLoopNamesTheOverriddenHooksInsideAStep) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.enable_progress_bar = true;  // the built-ins, which must override none
  options.enable_checkpointing = true;
  options.loggers = {"csv"};
  options.max_steps = 3;
  Trainer trainer(options);
  auto watcher = std::make_shared<GradientWatcher>();
  trainer.add_callback(watcher);
  InStepHookProbe probe;
  // RegressionModule overrides on_before_optimizer_step (it counts the steps).
  trainer.fit(std::make_shared<RegressionModule>(), std::make_shared<RegressionData>(64, 8));
  std::set<std::string> names(probe.overridden().begin(), probe.overridden().end());
  EXPECT_EQ(names, (std::set<std::string>{"callback GradientWatcher::on_after_backward",
                                          "the module::on_before_optimizer_step"}));
  EXPECT_EQ(watcher->calls, 3);
}

// A Fabric with one process on the CPU, set up with a FusedAdamW.
struct FabricRun {
  explicit FabricRun(bool cuda_graph) : fabric(FabricOptions{.accelerator = "cpu", .cuda_graph = cuda_graph}) {
    fabric.launch();
    torch::manual_seed(3);
    auto model = std::make_shared<torch::nn::LinearImpl>(4, 1);
    auto [wrapped, opt] =
        fabric.setup(model, std::make_shared<FusedAdamW>(model->parameters(), torch::optim::AdamWOptions(0.1)));
    module = wrapped;
    optimizer = opt;
  }
  torch::Tensor step(const Batch& batch) {
    auto loss = torch::mse_loss(module->forward(batch.input), batch.target);
    fabric.backward(loss);
    fabric.step(*optimizer);
    fabric.zero_grad(*optimizer);
    return loss;
  }
  Fabric fabric;
  std::shared_ptr<FabricModule<torch::nn::LinearImpl>> module;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
};

TEST(CudaGraphRefusal, TheFabricsCapturedStepOnTheCpu) {
  FabricRun run(/*cuda_graph=*/true);
  try {
    (void)run.fabric.captured_step([&](const Batch& batch) { return run.step(batch); });
    FAIL() << "cuda_graph on the CPU must be refused";
  } catch (const NotSupportedError& error) {
    expect_refused(error.what(), "this run is on cpu");
  }
}

TEST(CudaGraphRefusal, WithoutCudaGraphTheFabricsCapturedStepRunsTheStepAsWritten) {
  FabricRun captured(/*cuda_graph=*/false), direct(/*cuda_graph=*/false);
  auto step = captured.fabric.captured_step([&](const Batch& batch) { return captured.step(batch); });
  EXPECT_EQ(step.capture(), nullptr) << "nothing to capture without cuda_graph";
  for (int64_t i = 0; i < 5; ++i) {
    const Batch batch{torch::randn({8, 4}), torch::randn({8, 1})};
    const auto a = step(batch);
    const auto b = direct.step(batch);
    EXPECT_TRUE(torch::equal(a, b)) << "step " << i;
  }
  EXPECT_EQ(captured.fabric.global_step(), 5);
  EXPECT_TRUE(torch::equal(captured.module->module().weight, direct.module->module().weight));
  EXPECT_FALSE(step.skipped());
}

}  // namespace
}  // namespace volt::testing
