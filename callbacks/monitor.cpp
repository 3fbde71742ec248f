#include "callbacks/monitor.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "trainer/trainer.h"

namespace volt {

MonitorMode parse_monitor_mode(const std::string& text, const std::string& owner) {
  if (text == "min") return MonitorMode::Min;
  if (text == "max") return MonitorMode::Max;
  throw ConfigurationError(owner + ": expected mode 'min' or 'max', got '" + text + "'");
}

std::vector<std::pair<std::string, MonitorMode>> monitor_modes() {
  return {{"min", MonitorMode::Min}, {"max", MonitorMode::Max}};
}

std::string to_string(MonitorMode mode) { return mode == MonitorMode::Min ? "min" : "max"; }

bool is_better(double candidate, double reference, MonitorMode mode) {
  if (std::isnan(candidate)) return false;
  if (std::isnan(reference)) return true;
  return mode == MonitorMode::Min ? candidate < reference : candidate > reference;
}

double worst_value(MonitorMode mode) {
  const double inf = std::numeric_limits<double>::infinity();
  return mode == MonitorMode::Min ? inf : -inf;
}

std::optional<double> monitored_value(const Trainer& trainer, const std::string& name) {
  const auto& metrics = trainer.callback_metrics();
  auto found = metrics.find(name);
  if (found == metrics.end()) return std::nullopt;
  return found->second;
}

std::string available_metrics(const Trainer& trainer) {
  std::string names;
  for (const auto& [name, value] : trainer.callback_metrics()) names += (names.empty() ? "" : ", ") + name;
  return names.empty() ? "(none logged yet)" : names;
}

}  // namespace volt
