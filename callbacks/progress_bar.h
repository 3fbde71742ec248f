#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "callbacks/callback.h"
#include "core/option_schema.h"

namespace volt {

struct ProgressBarOptions {
  int64_t refresh_rate = 1;  // batches between updates; >= 1
  bool plain = false;        // a line per update even on a terminal

  static const OptionSchema<ProgressBarOptions>& schema();
  void validate() const { schema().validate(*this); }
};

// Progress of training, validation, test and predict on global rank 0: epoch, batch/total,
// it/s, ETA and the prog_bar metrics. On a terminal it redraws one line in place every
// `refresh_rate` batches; otherwise (a log file, CI) it prints a plain line per update, every
// `refresh_rate` batches and at the end of each loop.
class ProgressBar : public Callback {
 public:
  CallbackRole role() const override { return CallbackRole::ProgressBar; }
  explicit ProgressBar(ProgressBarOptions options);
  explicit ProgressBar(int64_t refresh_rate = 1, bool force_plain = false);

  void on_train_epoch_start(Trainer& trainer, Module& module) override;
  void on_train_batch_end(Trainer& trainer, Module& module, const torch::Tensor& loss, const Batch& batch,
                          int64_t batch_idx) override;
  void on_train_epoch_end(Trainer& trainer, Module& module) override;
  void on_validation_start(Trainer& trainer, Module& module) override;
  void on_validation_batch_end(Trainer& trainer, Module& module, const Batch& batch, int64_t batch_idx) override;
  void on_validation_end(Trainer& trainer, Module& module) override;
  void on_test_start(Trainer& trainer, Module& module) override;
  void on_test_batch_end(Trainer& trainer, Module& module, const Batch& batch, int64_t batch_idx) override;
  void on_test_end(Trainer& trainer, Module& module) override;
  void on_predict_start(Trainer& trainer, Module& module) override;
  void on_predict_batch_end(Trainer& trainer, Module& module, const torch::Tensor& prediction,
                            const Batch& batch, int64_t batch_idx) override;
  void on_predict_end(Trainer& trainer, Module& module) override;

  // The line the bar would print now (exposed for tests).
  std::string render(const Trainer& trainer, const std::string& label, int64_t done, int64_t total) const;

 private:
  void start(const Trainer& trainer);
  void update(const Trainer& trainer, const std::string& label, int64_t done, int64_t total, bool final);

  int64_t refresh_rate_;
  bool interactive_;
  std::chrono::steady_clock::time_point started_;        // of the loop being drawn
  std::chrono::steady_clock::time_point train_started_;  // of the training epoch (outlives validations)
  bool line_open_ = false;
};

}  // namespace volt
