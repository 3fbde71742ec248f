#pragma once
#include "strategies/strategy.h"
#include "trainer/registry/registry.h"

namespace volt {

// Every strategy selectable by name (`--strategy NAME[:key=value,...]`, `--list-strategies`).
// The built-ins are registered on first use; users add their own with
// strategy_registry().add(name, description, options, factory) before building a Trainer.
Registry<Strategy>& strategy_registry();

}  // namespace volt
