#pragma once
// The placement part (placement.h) of FSDP: a step's forward runs with the root unit gathered
// (units below gather themselves; the first forward records their order, by which they prefetch
// when asked), and evaluation needs as many steps on every rank (its forwards gather).
#include "strategies/placement.h"

namespace volt {

class FSDPStrategy;

class FSDPPlacement : public Placement {
 public:
  explicit FSDPPlacement(FSDPStrategy& owner);

  ScopeGuard forward_context(RunningStage stage) override;  // [collective: the root's gather]
  bool evaluation_needs_equal_steps() const override { return true; }

 private:
  FSDPStrategy& fsdp_;
};

}  // namespace volt
