#pragma once
#include <set>
#include <vector>

#include "loggers/log_directory.h"
#include "loggers/logger.h"

namespace volt {

// Lightning's CSV layout: <save_dir>/<name>/version_<N>/metrics.csv (columns: step, epoch when
// logged, then one per metric, blank where a row lacks it) and hparams.yaml. Rows are kept in
// memory and the file is rewritten on save(), every `flush_every_n_steps` logged steps and at the
// end, so that a column that appears late still gets a header.
class CSVLogger : public Logger {
 public:
  explicit CSVLogger(std::string save_dir, std::string name = "volt_logs", int64_t version = -1,
                     int64_t flush_every_n_steps = 100);
  std::string name() const override { return name_; }
  int64_t version() const override { return directory_.version(); }
  void set_version(int64_t version) override { directory_.set_version(version); }
  std::string log_dir() const override { return directory_.path(); }

  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void log_hyperparams(const Hyperparameters& hparams) override;
  void save() override;

 private:
  std::string name_;
  LogDirectory directory_;
  int64_t flush_every_n_steps_;
  int64_t rows_since_save_ = 0;
  std::vector<std::map<std::string, double>> rows_;
  std::set<std::string> columns_;
};

}  // namespace volt
