// volt::FusedAdamW in capturable mode (Note [A step a graph can replay]) on the CPU, where
// LibTorch 2.4+ has the fused kernel: the same results as its ordinary step, learning rates read
// from device tensors that refresh_learning_rates() sets, a step skipped on the device by
// step_unless, and host step counts brought up to date for a checkpoint. LibTorch 1.13 refuses
// the mode.
#include <gtest/gtest.h>

#include "checkpoint/optimizer_state.h"
#include "core/compat.h"
#include "core/error.h"
#include "tests/support/fused_adamw_problem.h"
#include "run/optim/fused_adamw.h"

namespace volt::testing {
namespace {

#define VOLT_REQUIRE_FUSED_ADAMW()                                                              \
  do {                                                                                          \
    if (!FusedAdamW::fused_available()) GTEST_SKIP() << "LibTorch " TORCH_VERSION " has no fused AdamW kernel"; \
  } while (false)

FusedAdamW& fused(AdamWProblem& problem) { return static_cast<FusedAdamW&>(*problem.optimizer); }

int64_t host_step(const AdamWProblem& problem, size_t i) {
  const auto& state = problem.optimizer->state();
  const auto found = state.find(compat::optimizer_state_key(problem.params[i]));
  return found == state.end() ? -1 : static_cast<const torch::optim::AdamWParamState&>(*found->second).step();
}

void set_lr(AdamWProblem& problem, double factor) {
  for (auto& group : problem.optimizer->param_groups()) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    options.lr(options.lr() * factor);
  }
}

TEST(FusedAdamWCapturable, OnlyWhereTheFusedKernelExists) {
  FusedAdamW optimizer(std::vector<torch::Tensor>{torch::zeros({2}, torch::requires_grad())});
  if (FusedAdamW::fused_available()) {
    optimizer.set_capturable(true);
    EXPECT_TRUE(optimizer.capturable());
  } else {
    EXPECT_THROW(optimizer.set_capturable(true), NotSupportedError);
    EXPECT_THROW(optimizer.step_unless(torch::zeros({1})), StateError);
  }
}

TEST(FusedAdamWCapturable, EqualsTheOrdinaryStepAsTheLearningRateChanges) {
  VOLT_REQUIRE_FUSED_ADAMW();
  for (const bool amsgrad : {false, true}) {
    auto capturable = make_adamw_problem(make_fused, torch::kCPU, amsgrad);
    auto ordinary = make_adamw_problem(make_fused, torch::kCPU, amsgrad);
    fused(capturable).set_capturable(true);
    for (int64_t step = 0; step < 10; ++step) {
      if (step == 5) {
        // What an LR scheduler does: the options change, the device tensors follow.
        set_lr(capturable, 0.5);
        set_lr(ordinary, 0.5);
        fused(capturable).refresh_learning_rates();
      }
      adamw_problem_step(capturable, step);
      adamw_problem_step(ordinary, step);
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_TRUE(torch::allclose(capturable.params[i], ordinary.params[i], 1e-6, 1e-7))
            << "amsgrad " << amsgrad << ", step " << step << ", parameter " << i << ": largest difference "
            << (capturable.params[i] - ordinary.params[i]).abs().max().item<double>();
      }
    }
    fused(capturable).sync_host_steps();
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(host_step(capturable, i), host_step(ordinary, i)) << "parameter " << i;
    EXPECT_EQ(host_step(capturable, 3), 6) << "the late joiner counts its own steps";
    EXPECT_EQ(host_step(capturable, 4), -1) << "no gradient, no state";
  }
}

TEST(FusedAdamWCapturable, StepUnlessSkipsOnTheDeviceAndDoesNotCountTheStep) {
  VOLT_REQUIRE_FUSED_ADAMW();
  auto problem = make_adamw_problem(make_fused, torch::kCPU, false);
  auto& optimizer = fused(problem);
  optimizer.set_capturable(true);
  adamw_problem_step(problem, 0);
  const auto before = problem.params[0].detach().clone();
  // A step whose gradients held inf: nothing moves, the count stays.
  problem.optimizer->zero_grad();
  (problem.params[0].sum() * 2).backward();
  optimizer.step_unless(torch::ones({1}));
  EXPECT_TRUE(torch::equal(problem.params[0], before));
  optimizer.sync_host_steps();
  EXPECT_EQ(host_step(problem, 0), 1);
  // A finite one steps as step() would.
  auto reference = make_adamw_problem(make_fused, torch::kCPU, false);
  adamw_problem_step(reference, 0);
  reference.optimizer->zero_grad();
  (reference.params[0].sum() * 2).backward();
  reference.optimizer->step();
  optimizer.step_unless(torch::zeros({1}));
  EXPECT_TRUE(torch::allclose(problem.params[0], reference.params[0], 1e-6, 1e-7));
  optimizer.sync_host_steps();
  EXPECT_EQ(host_step(problem, 0), 2);
}

TEST(FusedAdamWCapturable, ACheckpointSavesTheDevicesStepCountsAndALoadReplacesThem) {
  VOLT_REQUIRE_FUSED_ADAMW();
  auto problem = make_adamw_problem(make_fused, torch::kCPU, false);
  fused(problem).set_capturable(true);
  for (int64_t step = 0; step < 3; ++step) adamw_problem_step(problem, step);
  EXPECT_EQ(host_step(problem, 0), 0) << "the host's count lags in capturable mode";
  prepare_optimizer_state_for_save(*problem.optimizer);
  EXPECT_EQ(host_step(problem, 0), 3);
  const auto saved = optimizer_state_dict(*problem.optimizer);

  // Into a fresh capturable optimizer that has stepped once: the loaded counts win.
  auto resumed = make_adamw_problem(make_fused, torch::kCPU, false);
  fused(resumed).set_capturable(true);
  adamw_problem_step(resumed, 0);
  load_optimizer_state_dict(*resumed.optimizer, saved, "optimizer 0");
  for (size_t i = 0; i < resumed.params.size(); ++i) {
    resumed.params[i].detach().copy_(problem.params[i].detach());
  }
  adamw_problem_step(problem, 3);
  adamw_problem_step(resumed, 3);
  EXPECT_TRUE(torch::allclose(problem.params[0], resumed.params[0], 1e-6, 1e-7));
  prepare_optimizer_state_for_save(*resumed.optimizer);
  EXPECT_EQ(host_step(resumed, 0), 4);
}

}  // namespace
}  // namespace volt::testing
