#pragma once
// What ModelCheckpoint and EarlyStopping share: a monitored metric read from the Trainer's
// callback_metrics, and the direction in which it improves.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace volt {

class Trainer;

enum class MonitorMode { Min, Max };

// "min" or "max"; throws ConfigurationError naming `owner` otherwise.
MonitorMode parse_monitor_mode(const std::string& text, const std::string& owner);
// The names of the modes, for an OptionSchema choice.
std::vector<std::pair<std::string, MonitorMode>> monitor_modes();
std::string to_string(MonitorMode mode);

// Whether `candidate` is strictly better than `reference` in `mode`. NaN is the worst value: it is
// never better than anything, and anything else is better than it.
bool is_better(double candidate, double reference, MonitorMode mode);

// The worst possible value in `mode` (+inf for min, -inf for max): where "best" starts.
double worst_value(MonitorMode mode);

// trainer.callback_metrics()[name], or nullopt when it was not logged.
std::optional<double> monitored_value(const Trainer& trainer, const std::string& name);

// "a, b, c": the metrics that are available, for "not found" messages.
std::string available_metrics(const Trainer& trainer);

}  // namespace volt
