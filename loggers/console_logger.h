#pragma once
#include <iosfwd>
#include <map>
#include <string>

#include "loggers/logger.h"

namespace volt {

// Epoch summaries on the terminal: after each training epoch (its validation included) a table of
// the latest value of every metric logged during it; at the end of a validate/test run a table of
// its results. What a user sees when the progress bar is off (the Trainer adds one then, see
// docs/callbacks_and_loggers.md), or beside it. Writes to `out` (std::cout by default); no files.
class ConsoleLogger : public Logger {
 public:
  bool prints_to_terminal() const override { return true; }
  explicit ConsoleLogger(std::ostream* out = nullptr);
  std::string name() const override { return "console"; }
  int64_t version() const override { return 0; }
  std::string log_dir() const override { return ""; }

  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void log_hyperparams(const Hyperparameters& hparams) override {}
  void log_epoch_end(const torch::nn::Module& module, int64_t epoch, int64_t step) override;
  void finalize(TrainerStatus status) override;

  // The table printed for `metrics` under `title` (exposed for tests).
  static std::string table(const std::string& title, const std::map<std::string, double>& metrics);

 private:
  std::ostream& out_;
  std::map<std::string, double> pending_;  // latest value of each metric since the last table
};

}  // namespace volt
