#pragma once
#include <set>
#include <vector>

#include "loggers/log_directory.h"
#include "loggers/logger.h"

namespace volt {

struct CSVLoggerOptions {
  std::string save_dir = ".";       // the Trainer passes its default_root_dir
  std::string name = "volt_logs";   // experiment directory under save_dir
  int64_t version = -1;             // -1: the next free version
  int64_t flush_every_n_steps = 100;  // append to metrics.csv every n rows; >= 1

  static const OptionSchema<CSVLoggerOptions>& schema();
  void validate() const { schema().validate(*this); }
};

// Lightning's CSV layout: <save_dir>/<name>/version_<N>/metrics.csv and hparams.yaml. The CSV's
// columns are step, epoch, then every metric in the order it first appeared; a cell is blank
// where its row lacks the metric. Rows are buffered and appended every `flush_every_n_steps`
// rows and at the end; a metric that appears late rewrites the file once with a wider header
// (streamed, so memory stays bounded by the buffer).
class CSVLogger : public Logger {
 public:
  explicit CSVLogger(CSVLoggerOptions options);
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
  // Rewrites metrics.csv with header_ (which gained columns): old rows get blank cells.
  void widen_file(size_t old_columns);

  std::string name_;
  LogDirectory directory_;
  int64_t flush_every_n_steps_;
  std::vector<std::map<std::string, double>> pending_;  // rows not yet on disk
  std::vector<std::string> header_;                     // the columns of the file on disk
  bool file_started_ = false;
};

}  // namespace volt
