#pragma once
// volt::Logger — where metrics and hyperparameters go. The Trainer calls loggers on global rank 0
// only, so an implementation never needs to check ranks itself. Several loggers can be active.
#include <cstdint>
#include <map>
#include <string>

#include "trainer/hyperparameters.h"
#include "trainer/trainer_state.h"

namespace volt {

class Logger {
 public:
  virtual ~Logger() = default;
  virtual std::string name() const = 0;
  // The run's version number (version_<N>): chosen on first use as the next free one.
  virtual int64_t version() const = 0;
  // The directory this run writes to; ModelCheckpoint's default directory sits under it.
  virtual std::string log_dir() const = 0;
  // Fixes the version to `version`. With several processes the Trainer resolves version() on
  // global rank 0 and calls this on every other rank, so that log_dir() (and what sits under it,
  // such as checkpoints) is the same directory on every rank. Loggers without versions ignore it.
  virtual void set_version(int64_t version) {}

  virtual void log_metrics(const std::map<std::string, double>& metrics, int64_t step) = 0;
  virtual void log_hyperparams(const Hyperparameters& hparams) = 0;
  // Makes everything logged so far durable (called periodically and at the end).
  virtual void save() {}
  virtual void finalize(TrainerStatus status) { save(); }
};

}  // namespace volt
