// Note [FSDP's state]: the step's state as FSDP's parts move it, for automatic optimization (the
// forward scope closes before the backward), an accumulation window (the next micro-batch's
// forward after PostBackward) and manual optimization (backward and optimizer step inside the
// scope, where the root is regathered); clear() starts over.
#include <gtest/gtest.h>

#include "strategies/fsdp/fsdp_state.h"

namespace volt::fsdp {
namespace {

TEST(FSDPState, TheStepMovesThroughFSDP2sStatesInEveryOptimizationMode) {
  FSDPState state;
  EXPECT_EQ(state.step_state(), StepState::Idle);
  EXPECT_TRUE(state.empty());

  // Automatic optimization, two micro-batches then the step.
  for (int micro_batch = 0; micro_batch < 2; ++micro_batch) {
    state.enter_forward_scope();
    EXPECT_EQ(state.step_state(), StepState::Forward);
    state.leave_forward_scope();
    EXPECT_FALSE(state.in_forward_scope());
    state.begin_backward();
    EXPECT_EQ(state.step_state(), StepState::PreBackward);
    state.end_backward();
    EXPECT_EQ(state.step_state(), StepState::PostBackward) << to_string(state.step_state());
  }
  state.after_optimizer_steps();
  EXPECT_EQ(state.step_state(), StepState::Idle);

  // Manual optimization: all inside the scope.
  state.enter_forward_scope();
  state.begin_backward();
  state.end_backward();
  EXPECT_EQ(state.step_state(), StepState::Forward) << "back in the step's forward scope";
  EXPECT_TRUE(state.in_forward_scope());
  state.after_optimizer_steps();
  EXPECT_EQ(state.step_state(), StepState::Forward) << "the scope is still open";
  state.leave_forward_scope();
  EXPECT_EQ(state.step_state(), StepState::Idle);

  // A backward that threw leaves PreBackward; clear() starts over.
  state.begin_backward();
  state.clear();
  EXPECT_EQ(state.step_state(), StepState::Idle);
  EXPECT_EQ(to_string(StepState::PostBackward), "PostBackward");
}

}  // namespace
}  // namespace volt::fsdp
