#include "callbacks/callback_registry.h"

#include "callbacks/early_stopping.h"
#include "callbacks/ema.h"
#include "callbacks/gradient_accumulation_scheduler.h"
#include "callbacks/learning_rate_monitor.h"
#include "callbacks/model_checkpoint.h"
#include "callbacks/model_summary.h"
#include "callbacks/progress_bar.h"
#include "callbacks/throughput_monitor.h"
#include "callbacks/timer.h"

namespace volt {
namespace {

// Each callback's keys are declared once, by its options struct's schema.
template <typename CallbackType, typename Options>
void add_callback(Registry<Callback>& registry, const std::string& name, std::string description) {
  registry.add(name, std::move(description), Options::schema(),
               [](const Options& options) { return std::make_shared<CallbackType>(options); });
}

void register_builtin_callbacks(Registry<Callback>& registry) {
  add_callback<ProgressBar, ProgressBarOptions>(registry, "progress_bar",
                                                "epoch, batch/total, it/s, ETA and prog_bar metrics on rank 0");
  add_callback<ModelSummary, ModelSummaryOptions>(registry, "model_summary",
                                                  "a table of submodules and parameter counts at fit start");
  add_callback<EarlyStopping, EarlyStoppingOptions>(registry, "early_stopping",
                                                    "stop fit when a monitored metric stops improving");
  add_callback<ModelCheckpoint, ModelCheckpointOptions>(
      registry, "model_checkpoint", "save checkpoints during fit, keeping the best by a monitored metric");
  add_callback<LearningRateMonitor, LearningRateMonitorOptions>(
      registry, "learning_rate_monitor", "log each optimizer's learning rate (and momentum) to the loggers");
  add_callback<Timer, TimerOptions>(registry, "timer", "stop fit after a training time budget");
  add_callback<GradientAccumulationScheduler, GradientAccumulationSchedulerOptions>(
      registry, "gradient_accumulation_scheduler", "change accumulate_grad_batches by epoch");
  add_callback<EMA, EMAOptions>(registry, "ema", "an exponential moving average of the weights, used for validation");
  add_callback<ThroughputMonitor, ThroughputMonitorOptions>(
      registry, "throughput_monitor", "batches, samples, items and FLOPs per second and MFU, without a device sync");
}

}  // namespace

Registry<Callback>& callback_registry() {
  static Registry<Callback> registry = [] {
    Registry<Callback> r("callback", "--callback");
    register_builtin_callbacks(r);
    return r;
  }();
  return registry;
}

}  // namespace volt
