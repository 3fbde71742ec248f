#include "strategies/fsdp/fsdp_placement.h"

namespace volt {

FSDPPlacement::FSDPPlacement(const PartContext& context, std::shared_ptr<fsdp::FSDPState> state)
    : Placement(context), state_(std::move(state)) {}

ScopeGuard FSDPPlacement::forward_context(RunningStage stage) {
  auto base = Placement::forward_context(stage);
  if (state_->empty()) return base;
  auto& root = state_->root();
  // The root's "forward" is the whole step, which may itself run backward (manual optimization's
  // manual_backward inside training_step): its forward ends as soon as it is gathered, and it
  // stays gathered until its backward (or, below, the end of an evaluation step) releases it.
  state_->order().start();  // the first forward records the units' order (nothing once recorded)
  root.before_forward();
  root.after_forward(torch::Tensor());
  state_->enter_forward_scope();
  return ScopeGuard([state = state_, base = std::make_shared<ScopeGuard>(std::move(base))]() mutable {
    state->leave_forward_scope();
    state->order().stop();
    // No backward follows an evaluation forward: nothing needs the root's parameters until the
    // next forward gathers them, nor another unit's that a prefetch gathered for a forward that
    // did not run it.
    if (!torch::GradMode::is_enabled()) state->release_gathered_units();
    base.reset();
  });
}

}  // namespace volt
