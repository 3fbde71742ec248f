#pragma once
#include "strategies/strategy.h"
#include "core/registry.h"

namespace volt {

// Every strategy selectable by name (`--strategy NAME[:key=value,...]`, `--list-strategies`).
// The built-ins are registered on first use; users add their own with
// strategy_registry().add(name, description, options, factory) before building a Trainer.
Registry<Strategy>& strategy_registry();

// A --strategy value, parsed once (parse_named_spec): the entry it names and the user's values.
NamedSpec parse_strategy_spec(const std::string& text);

// Whether `spec` is "auto": the one name whose strategy depends on the number of processes, so a
// run builds it once it knows them (create_strategy), where it builds any other name first.
bool is_automatic_strategy(const NamedSpec& spec);

// Builds the strategy `spec` names for a run of `world_size` processes. "auto" resolves here, in
// one place: single_device for one process; for more, "ddp" when it is registered, otherwise a
// ConfigurationError saying so. A non-distributed strategy with more than one process is a
// ConfigurationError naming the process count and where it came from (`origin`).
std::shared_ptr<Strategy> create_strategy(const NamedSpec& spec, int64_t world_size, const std::string& origin);
// The same for spec text (parsed once).
std::shared_ptr<Strategy> create_strategy(const std::string& spec, int64_t world_size, const std::string& origin);

// Checks that `strategy` can run `world_size` processes (see create_strategy), its options
// included (Strategy::check_world_size).
void check_strategy_fits(const Strategy& strategy, int64_t world_size, const std::string& origin);

}  // namespace volt
