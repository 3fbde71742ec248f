#pragma once
// volt::Logger — where metrics and hyperparameters go. The Trainer calls loggers on global rank 0
// only, so an implementation never needs to check ranks itself. Several loggers can be active;
// each call reaches them in the order they were added.
#include <cstdint>
#include <map>
#include <string>

#include "core/hyperparameters.h"
#include "core/run_stage.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace volt {

class Logger {
 public:
  virtual ~Logger() = default;
  virtual std::string name() const = 0;
  // The run's version number (version_<N>), fixed when the logger is built.
  virtual int64_t version() const = 0;
  // The directory this run writes to; ModelCheckpoint's default directory sits under it.
  virtual std::string log_dir() const = 0;
  // Fixes the version to `version`. With several processes the Trainer resolves version() on
  // global rank 0 and calls this on every other rank, so that log_dir() (and what sits under it,
  // such as checkpoints) is the same directory on every rank. Loggers without versions ignore it.
  virtual void set_version(int64_t version) {}
  // Whether it prints the epochs' metrics on the terminal (the console logger): without a
  // progress bar the Trainer adds one such logger unless the user has one.
  virtual bool prints_to_terminal() const { return false; }

  // `step` is the number of optimizer steps taken so far; `metrics` includes "epoch".
  virtual void log_metrics(const std::map<std::string, double>& metrics, int64_t step) = 0;
  virtual void log_hyperparams(const Hyperparameters& hparams) = 0;
  // After a training epoch ended (its validation included) and its metrics were logged; `module`
  // is the model being trained. For per-epoch output such as tables or weight histograms.
  virtual void log_epoch_end(const torch::nn::Module& module, int64_t epoch, int64_t step) {}
  // Makes everything logged so far durable (called periodically and at the end).
  virtual void save() {}
  // At the end of fit/validate/test/predict, also when it failed (status Interrupted).
  virtual void finalize(TrainerStatus status) { save(); }
};

}  // namespace volt
