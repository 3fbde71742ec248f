#include "core/in_step_hook_probe.h"

namespace volt {
namespace {

InStepHookProbe*& current() {
  thread_local InStepHookProbe* probe = nullptr;
  return probe;
}

}  // namespace

InStepHookProbe::InStepHookProbe() : previous_(current()) { current() = this; }

InStepHookProbe::~InStepHookProbe() { current() = previous_; }

InStepHookProbe* InStepHookProbe::active() { return current(); }

void InStepHookProbe::default_body_ran() {
  if (auto* probe = current()) probe->default_ran_ = true;
}

}  // namespace volt
