#pragma once
// The placement part (placement.h) of FSDP: a step's forward runs with the root unit gathered
// (units below gather themselves; the first forward records their order, by which they prefetch
// when asked), and evaluation needs as many steps on every rank (its forwards gather). The
// scope is the step's Forward state in the strategy's FSDPState (Note [FSDP's state]).
#include <memory>

#include "strategies/fsdp/fsdp_state.h"
#include "strategies/placement.h"

namespace volt {

class FSDPPlacement : public Placement {
 public:
  FSDPPlacement(const PartContext& context, std::shared_ptr<fsdp::FSDPState> state);

  ScopeGuard forward_context(RunningStage stage) override;  // [collective: the root's gather]
  bool evaluation_needs_equal_steps() const override { return true; }

 private:
  std::shared_ptr<fsdp::FSDPState> state_;
};

}  // namespace volt
