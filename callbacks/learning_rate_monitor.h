#pragma once
#include <map>
#include <string>
#include <vector>

#include "callbacks/callback.h"
#include "core/option_schema.h"

namespace volt {

// When the learning-rate monitor writes: each scheduler at its own interval (Auto: step-interval
// schedulers every log_every_n_steps optimizer steps, the rest at epoch start), or all every
// log_every_n_steps steps (Step), or all at each epoch start (Epoch).
enum class LoggingInterval { Auto, Step, Epoch };
LoggingInterval parse_logging_interval(const std::string& text);  // "", "auto", "step", "epoch"

struct LearningRateMonitorOptions {
  LoggingInterval logging_interval = LoggingInterval::Auto;
  bool log_momentum = false;      // also log momentum (SGD/RMSprop momentum, Adam/AdamW beta1)
  bool log_weight_decay = false;  // also log weight decay

  static const OptionSchema<LearningRateMonitorOptions>& schema();
  void validate() const { schema().validate(*this); }
};

// Logs every optimizer's learning rate (and optionally momentum and weight decay) to the loggers,
// Lightning's LearningRateMonitor. Keys: the scheduler's SchedulerConfig::name, else
// "lr-<OptimizerClass>" (with "-1", "-2"... when classes repeat); "/pg<k>" per param group when an
// optimizer has several; "-momentum" (SGD/RMSprop momentum, Adam/AdamW beta1) and
// "-weight_decay" suffixes. A value is logged at the start of the step that uses it, with the
// number of steps taken so far: the row of step 0 holds the initial learning rate. Needs a logger
// (fast_dev_run excepted).
class LearningRateMonitor : public Callback {
 public:
  explicit LearningRateMonitor(LearningRateMonitorOptions options);
  explicit LearningRateMonitor(LoggingInterval interval = LoggingInterval::Auto, bool log_momentum = false,
                               bool log_weight_decay = false);

  void on_train_start(Trainer& trainer, Module& module) override;
  void on_train_epoch_start(Trainer& trainer, Module& module) override;
  void on_train_batch_start(Trainer& trainer, Module& module, const Batch& batch, int64_t batch_idx) override;

  // The values that would be logged now for optimizers whose interval is `step_interval`
  // (exposed for tests).
  std::map<std::string, double> current_values(const Trainer& trainer, bool step_interval) const;

 private:
  // Whether optimizer `index` is logged at step (true) or epoch (false) interval.
  bool logs_per_step(const Trainer& trainer, size_t index) const;

  LoggingInterval interval_;
  bool log_momentum_;
  bool log_weight_decay_;
  std::vector<std::string> names_;  // one per optimizer, resolved at train start
};

}  // namespace volt
