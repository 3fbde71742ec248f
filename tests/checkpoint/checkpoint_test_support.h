#pragma once
// Helpers shared by the checkpoint tests: interrupting a fit where a checkpoint is written, and
// modules with schedulers the regression problem does not offer.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {

// Where two checkpoint values differ, as a path from `where` ("" when they are equal): tensors by
// value wherever they live (a file written in the background holds host copies of device
// tensors), containers element by element, anything else by IValue equality.
inline std::string checkpoint_difference(const c10::IValue& a, const c10::IValue& b, const std::string& where) {
  if (a.isTensor() && b.isTensor()) return torch::equal(a.toTensor().cpu(), b.toTensor().cpu()) ? "" : where;
  if (a.isGenericDict() && b.isGenericDict()) {
    const auto x = a.toGenericDict(), y = b.toGenericDict();
    if (x.size() != y.size()) return where + " (keys)";
    for (const auto& entry : x) {
      if (!y.contains(entry.key())) return where + " (keys)";
      std::ostringstream key;
      key << entry.key();  // a name, or an optimizer state's parameter index
      auto found = checkpoint_difference(entry.value(), y.at(entry.key()), where + "/" + key.str());
      if (!found.empty()) return found;
    }
    return "";
  }
  if (a.isList() && b.isList()) {
    const auto x = a.toList(), y = b.toList();
    if (x.size() != y.size()) return where + " (length)";
    for (size_t i = 0; i < x.size(); ++i) {
      auto found = checkpoint_difference(x.get(i), y.get(i), where + "[" + std::to_string(i) + "]");
      if (!found.empty()) return found;
    }
    return "";
  }
  return a == b ? "" : where;
}

// The names in a directory, sorted.
inline std::vector<std::string> directory_entries(const std::filesystem::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Stands for a crash: thrown right after a checkpoint was written.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted by the test") {}
};

// Where, in the loop, SaveAndInterrupt writes its checkpoint and stops the fit.
enum class SavePoint { TrainBatchEnd, ValidationEnd, TrainEpochEnd };

// Writes a checkpoint at (epoch, batch) of `point` (batch is ignored at TrainEpochEnd), then
// throws Interrupted; with `keep_going` it writes and lets the fit continue.
class SaveAndInterrupt : public Callback {
 public:
  SaveAndInterrupt(std::filesystem::path path, SavePoint point, int64_t epoch, int64_t batch, bool keep_going = false)
      : path_(std::move(path)), point_(point), epoch_(epoch), batch_(batch), keep_going_(keep_going) {}

  void on_train_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch&, int64_t batch_idx) override {
    if (point_ == SavePoint::TrainBatchEnd && trainer.current_epoch() == epoch_ && batch_idx == batch_) fire(trainer);
  }
  void on_validation_end(Trainer& trainer, Module&) override {
    if (point_ == SavePoint::ValidationEnd && !trainer.sanity_checking() && trainer.current_epoch() == epoch_ &&
        trainer.fit_progress().next_batch - 1 == batch_) {
      fire(trainer);
    }
  }
  void on_train_epoch_end(Trainer& trainer, Module&) override {
    if (point_ == SavePoint::TrainEpochEnd && trainer.current_epoch() == epoch_) fire(trainer);
  }
  bool fired = false;

 private:
  void fire(Trainer& trainer) {
    trainer.save_checkpoint(path_);
    fired = true;
    if (!keep_going_) throw Interrupted();
  }
  std::filesystem::path path_;
  SavePoint point_;
  int64_t epoch_, batch_;
  bool keep_going_;
};

// The regression module with an epoch-interval StepLR and a record of every training batch it saw.
class RecordingRegression : public RegressionModule {
 public:
  using RegressionModule::RegressionModule;
  bool epoch_scheduler = false;
  std::vector<double> batch_sums;  // sum of each training batch's inputs, in order
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    batch_sums.push_back(batch.input.sum().item<double>());
    // An epoch aggregate, which a resumed epoch must still compute over all its batches.
    log("epoch_input_sum", batch.input.sum(), {.on_step = false, .on_epoch = true, .reduce_fx = ReduceFx::Sum});
    return RegressionModule::training_step(batch, batch_idx);
  }
  OptimizerConfig configure_optimizers() override {
    auto config = RegressionModule::configure_optimizers();
    if (epoch_scheduler) {
      config.schedulers.push_back({std::make_shared<StepLR>(*config.optimizers[0], 1, 0.7), SchedulerInterval::Epoch});
    }
    return config;
  }
};

}  // namespace volt::testing
