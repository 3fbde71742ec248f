#pragma once
#include <memory>

#include "loggers/log_directory.h"
#include "loggers/logger.h"
#include "loggers/tensorboard/event_file_writer.h"

namespace volt {

struct TensorBoardLoggerOptions {
  std::string save_dir = ".";             // the Trainer passes its default_root_dir
  std::string name = "volt_logs";         // experiment directory under save_dir
  int64_t version = -1;                   // -1: the next free version
  int64_t histogram_every_n_epochs = 0;   // a histogram of every parameter every n epochs; 0: never
  int64_t histogram_bins = 64;            // buckets per histogram; >= 1

  static const OptionSchema<TensorBoardLoggerOptions>& schema();
  void validate() const { schema().validate(*this); }
};

// TensorBoard event files (events.out.tfevents.*) in <save_dir>/<name>/version_<N>, beside
// hparams.yaml: every logged metric as a scalar, hyperparameters for the HParams tab, text, and
// (every `histogram_every_n_epochs` epochs, 0 = never) a histogram of each parameter's weights.
// TensorBoard itself is not needed to write them. The file is created on the first write and
// flushed after every log_metrics call, so a running TensorBoard sees each step as it lands.
class TensorBoardLogger : public Logger {
 public:
  explicit TensorBoardLogger(TensorBoardLoggerOptions options);
  explicit TensorBoardLogger(std::string save_dir, std::string name = "volt_logs", int64_t version = -1,
                             int64_t histogram_every_n_epochs = 0, int64_t histogram_bins = 64);
  std::string name() const override { return name_; }
  int64_t version() const override { return directory_.version(); }
  void set_version(int64_t version) override { directory_.set_version(version); }  // before the first write
  std::string log_dir() const override { return directory_.path(); }

  // Every metric but "epoch" (which is the x-axis' companion, not a curve) becomes a scalar.
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  // hparams.yaml plus the HParams plugin's session-start record.
  void log_hyperparams(const Hyperparameters& hparams) override;
  void log_epoch_end(const torch::nn::Module& module, int64_t epoch, int64_t step) override;
  void save() override;
  // Closes the HParams session with Success (Finished) or Failure (Interrupted).
  void finalize(TrainerStatus status) override;

  // Markdown text for the Text tab.
  void log_text(const std::string& tag, const std::string& text, int64_t step);
  // A histogram of `values` (any shape; non-finite entries are left out).
  void log_histogram(const std::string& tag, const torch::Tensor& values, int64_t step);
  // The event file written so far ("" before the first write).
  std::string event_file() const { return writer_ ? writer_->path() : ""; }

 private:
  tensorboard::EventFileWriter& writer();

  std::string name_;
  LogDirectory directory_;
  int64_t histogram_every_n_epochs_;
  int64_t histogram_bins_;
  bool session_open_ = false;
  std::unique_ptr<tensorboard::EventFileWriter> writer_;
};

}  // namespace volt
