#pragma once
#include <map>
#include <string>

#include "callbacks/callback.h"
#include "core/option_schema.h"

namespace volt {

struct GradientAccumulationSchedulerOptions {
  // Epoch (0-based) → micro-batches per step from that epoch on; at least one pair, epochs >= 0,
  // factors >= 1. Written "0:8;4:4;8:1" on the command line.
  std::map<int64_t, int64_t> scheduling;

  static const OptionSchema<GradientAccumulationSchedulerOptions>& schema();
  void validate() const { schema().validate(*this); }
};

// Changes accumulate_grad_batches by epoch, Lightning's GradientAccumulationScheduler:
// {0: 8, 4: 4, 8: 1} accumulates 8 micro-batches per step in epochs 0-3, 4 in epochs 4-7, then 1.
// Epochs before the first key use 1. The Trainer's own accumulate_grad_batches must stay 1.
class GradientAccumulationScheduler : public Callback {
 public:
  // Throws ConfigurationError for an empty schedule, an epoch < 0 or a factor < 1.
  explicit GradientAccumulationScheduler(GradientAccumulationSchedulerOptions options);
  explicit GradientAccumulationScheduler(std::map<int64_t, int64_t> scheduling);
  // "0:8;4:4;8:1" (epoch:factor pairs separated by ';') as a schedule.
  static std::map<int64_t, int64_t> parse(const std::string& text);

  int64_t factor_for_epoch(int64_t epoch) const;
  const std::map<int64_t, int64_t>& scheduling() const { return scheduling_; }

  void on_train_start(Trainer& trainer, Module& module) override;
  void on_train_epoch_start(Trainer& trainer, Module& module) override;

 private:
  std::map<int64_t, int64_t> scheduling_;
};

}  // namespace volt
