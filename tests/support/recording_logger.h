#pragma once
// A Logger that keeps every row it is given, for tests that assert what was logged and at which
// step.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loggers/logger.h"

namespace volt::testing {

class RecordingLogger : public Logger {
 public:
  std::string name() const override { return "recording"; }
  int64_t version() const override { return 0; }
  std::string log_dir() const override { return ""; }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
    rows.emplace_back(step, metrics);
  }
  void log_hyperparams(const Hyperparameters&) override {}
  // (step, value) of every row that holds `key`.
  std::vector<std::pair<int64_t, double>> series(const std::string& key) const {
    std::vector<std::pair<int64_t, double>> out;
    for (const auto& [step, metrics] : rows) {
      if (auto found = metrics.find(key); found != metrics.end()) out.emplace_back(step, found->second);
    }
    return out;
  }
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows;
};

}  // namespace volt::testing
