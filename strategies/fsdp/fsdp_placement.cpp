#include "strategies/fsdp/fsdp_placement.h"

#include "strategies/fsdp/fsdp_strategy.h"

namespace volt {

FSDPPlacement::FSDPPlacement(FSDPStrategy& owner) : Placement(owner), fsdp_(owner) {}

ScopeGuard FSDPPlacement::forward_context(RunningStage stage) {
  auto base = Placement::forward_context(stage);
  auto& units_ = fsdp_.units_;
  auto& order_ = fsdp_.order_;
  if (units_.empty()) return base;
  auto& root = *units_.front();
  // The root's "forward" is the whole step, which may itself run backward (manual optimization's
  // manual_backward inside training_step): its forward ends as soon as it is gathered, and it
  // stays gathered until its backward (or, below, the end of an evaluation step) releases it.
  order_.start();  // the first forward records the units' order (nothing once recorded)
  root.before_forward();
  root.after_forward(torch::Tensor());
  fsdp_.step_scope_open_ = true;
  return ScopeGuard([this, &units_, &order_, base = std::make_shared<ScopeGuard>(std::move(base))]() mutable {
    fsdp_.step_scope_open_ = false;
    order_.stop();
    // No backward follows an evaluation forward: nothing needs the root's parameters until the
    // next forward gathers them, nor another unit's that a prefetch gathered for a forward that
    // did not run it. One still in flight is left to its next gather or release: waiting for a
    // collective may throw, which this exit must not.
    if (!torch::GradMode::is_enabled()) {
      for (auto& unit : units_) {
        if (!unit->flat().prefetching()) unit->flat().release();
      }
    }
    base.reset();
  });
}

}  // namespace volt
