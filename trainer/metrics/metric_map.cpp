#include "trainer/metrics/metric_map.h"

#include "core/named_scope.h"

namespace volt {

void MetricMap::set(const std::string& name, const torch::Tensor& value) { pending_[name] = value; }

void MetricMap::set(const std::string& name, double value) {
  pending_.erase(name);
  read_[name] = value;
}

const std::map<std::string, double>& MetricMap::values() const {
  if (!pending_.empty()) {
    for (auto& [name, value] : read_metrics(pending_)) read_[name] = value;
    pending_.clear();
  }
  return read_;
}

std::map<std::string, double> read_metrics(const std::map<std::string, torch::Tensor>& values) {
  NamedScope scope("volt::read_metrics");
  std::map<std::string, double> out;
  for (const auto& [name, value] : values) out[name] = value.item<double>();
  return out;
}

}  // namespace volt
