#include "callbacks/learning_rate_monitor.h"

#include <set>

#include "callbacks/type_name.h"
#include "core/error.h"
#include "trainer/trainer.h"

namespace volt {
namespace {

std::optional<double> momentum_of(const torch::optim::OptimizerOptions& options) {
  if (auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&options)) return sgd->momentum();
  if (auto* rms = dynamic_cast<const torch::optim::RMSpropOptions*>(&options)) return rms->momentum();
  if (auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&options)) return std::get<0>(adam->betas());
  if (auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(&options)) return std::get<0>(adamw->betas());
  return std::nullopt;
}

std::optional<double> weight_decay_of(const torch::optim::OptimizerOptions& options) {
  if (auto* o = dynamic_cast<const torch::optim::SGDOptions*>(&options)) return o->weight_decay();
  if (auto* o = dynamic_cast<const torch::optim::RMSpropOptions*>(&options)) return o->weight_decay();
  if (auto* o = dynamic_cast<const torch::optim::AdamOptions*>(&options)) return o->weight_decay();
  if (auto* o = dynamic_cast<const torch::optim::AdamWOptions*>(&options)) return o->weight_decay();
  if (auto* o = dynamic_cast<const torch::optim::AdagradOptions*>(&options)) return o->weight_decay();
  return std::nullopt;
}

const SchedulerConfig* scheduler_of(const Trainer& trainer, const torch::optim::Optimizer& optimizer) {
  for (const auto& config : trainer.lr_schedulers()) {
    if (&config.scheduler->optimizer() == &optimizer) return &config;
  }
  return nullptr;
}

}  // namespace

LoggingInterval parse_logging_interval(const std::string& text) {
  if (text.empty() || text == "auto") return LoggingInterval::Auto;
  if (text == "step") return LoggingInterval::Step;
  if (text == "epoch") return LoggingInterval::Epoch;
  throw ConfigurationError("LearningRateMonitor: expected logging_interval 'step', 'epoch' or '' (each "
                           "scheduler's own), got '" + text + "'");
}

const OptionSchema<LearningRateMonitorOptions>& LearningRateMonitorOptions::schema() {
  static const auto schema =
      OptionSchema<LearningRateMonitorOptions>("LearningRateMonitor")
          .choice("logging_interval", &LearningRateMonitorOptions::logging_interval,
                  {{"auto", LoggingInterval::Auto}, {"step", LoggingInterval::Step}, {"epoch", LoggingInterval::Epoch}},
                  "when to log: every log_every_n_steps steps, at each epoch start, or auto: each scheduler's own")
          .option("log_momentum", &LearningRateMonitorOptions::log_momentum, "also log momentum (Adam: beta1)")
          .option("log_weight_decay", &LearningRateMonitorOptions::log_weight_decay, "also log weight decay");
  return schema;
}

LearningRateMonitor::LearningRateMonitor(LearningRateMonitorOptions options)
    : LearningRateMonitor(options.logging_interval, options.log_momentum, options.log_weight_decay) {
  options.validate();
}

LearningRateMonitor::LearningRateMonitor(LoggingInterval interval, bool log_momentum, bool log_weight_decay)
    : interval_(interval), log_momentum_(log_momentum), log_weight_decay_(log_weight_decay) {}

void LearningRateMonitor::on_train_start(Trainer& trainer, Module&) {
  check<ConfigurationError>(!trainer.loggers().empty() || trainer.options().fast_dev_run > 0,
                            "LearningRateMonitor: the Trainer has no logger to write to; add one "
                            "(e.g. --logger csv) or remove the callback");
  names_.clear();
  std::map<std::string, int> seen;
  for (const auto& optimizer : trainer.optimizers()) {
    const SchedulerConfig* config = scheduler_of(trainer, *optimizer);
    std::string name = config && !config->name.empty() ? config->name : "lr-" + short_type_name(typeid(*optimizer));
    const int count = seen[name]++;
    names_.push_back(count == 0 ? name : name + "-" + std::to_string(count));
  }
}

bool LearningRateMonitor::logs_per_step(const Trainer& trainer, size_t index) const {
  if (interval_ != LoggingInterval::Auto) return interval_ == LoggingInterval::Step;
  const SchedulerConfig* config = scheduler_of(trainer, *trainer.optimizers()[index]);
  return config && config->interval == SchedulerInterval::Step;
}

std::map<std::string, double> LearningRateMonitor::current_values(const Trainer& trainer, bool step_interval) const {
  std::map<std::string, double> values;
  const auto& optimizers = trainer.optimizers();
  for (size_t i = 0; i < optimizers.size() && i < names_.size(); ++i) {
    if (logs_per_step(trainer, i) != step_interval) continue;
    const auto& groups = optimizers[i]->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string key = groups.size() == 1 ? names_[i] : names_[i] + "/pg" + std::to_string(g + 1);
      const auto& options = groups[g].options();
      values[key] = options.get_lr();
      if (log_momentum_) {
        if (auto momentum = momentum_of(options)) values[key + "-momentum"] = *momentum;
      }
      if (log_weight_decay_) {
        if (auto decay = weight_decay_of(options)) values[key + "-weight_decay"] = *decay;
      }
    }
  }
  return values;
}

void LearningRateMonitor::on_train_epoch_start(Trainer& trainer, Module&) {
  if (interval_ == LoggingInterval::Step) return;
  auto values = current_values(trainer, /*step_interval=*/false);
  if (!values.empty()) trainer.log_metrics(values);
}

void LearningRateMonitor::on_train_batch_start(Trainer& trainer, Module&, const Batch&, int64_t) {
  if (interval_ == LoggingInterval::Epoch) return;
  // Once per optimizer step: at the first micro-batch of each accumulation window.
  if (trainer.fit_progress().window_micro_batches != 0) return;
  if (trainer.global_step() % trainer.options().log_every_n_steps != 0) return;
  auto values = current_values(trainer, /*step_interval=*/true);
  if (!values.empty()) trainer.log_metrics(values);
}

}  // namespace volt
