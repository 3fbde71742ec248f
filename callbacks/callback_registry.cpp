#include "callbacks/callback_registry.h"

#include "callbacks/early_stopping.h"
#include "callbacks/ema.h"
#include "callbacks/gradient_accumulation_scheduler.h"
#include "callbacks/learning_rate_monitor.h"
#include "callbacks/model_checkpoint.h"
#include "callbacks/model_summary.h"
#include "callbacks/progress_bar.h"
#include "callbacks/timer.h"
#include "trainer/trainer_options.h"

namespace volt {
namespace {

// Options declared with an empty default are optional: read only when the user wrote them.
std::optional<double> optional_double(const OptionValues& o, const std::string& key) {
  return o.was_set(key) ? std::optional<double>(o.get_double(key)) : std::nullopt;
}

void register_builtin_callbacks(Registry<Callback>& registry) {
  registry.add("progress_bar", "epoch, batch/total, it/s, ETA and prog_bar metrics on rank 0",
               {{"refresh_rate", OptionType::Int, "1", "batches between updates"},
                {"plain", OptionType::Bool, "false", "a line per update even on a terminal"}},
               [](const OptionValues& o) {
                 return std::make_shared<ProgressBar>(o.get_int("refresh_rate"), o.get_bool("plain"));
               });
  registry.add("model_summary", "a table of submodules and parameter counts at fit start",
               {{"max_depth", OptionType::Int, "1", "depth of submodules to list"}},
               [](const OptionValues& o) { return std::make_shared<ModelSummary>(o.get_int("max_depth")); });
  registry.add("early_stopping", "stop fit when a monitored metric stops improving",
               {{"monitor", OptionType::String, "", "metric to watch (required), e.g. val_loss"},
                {"min_delta", OptionType::Double, "0", "an improvement must exceed this"},
                {"patience", OptionType::Int, "3", "checks without improvement before stopping"},
                {"mode", OptionType::String, "min", "min or max: which direction is better"},
                {"strict", OptionType::Bool, "true", "a metric that was not logged is an error"},
                {"check_finite", OptionType::Bool, "true", "stop when the metric is NaN or infinite"},
                {"stopping_threshold", OptionType::Double, "", "stop once the metric is better (unset: none)"},
                {"divergence_threshold", OptionType::Double, "", "stop once the metric is worse (unset: none)"},
                {"check_on_train_epoch_end", OptionType::Bool, "",
                 "check after each training epoch (true) or validation (false); unset: Lightning's rule"},
                {"verbose", OptionType::Bool, "false", "print improvements and the stop reason"}},
               [](const OptionValues& o) {
                 EarlyStoppingOptions e;
                 e.monitor = o.get_string("monitor");
                 e.min_delta = o.get_double("min_delta");
                 e.patience = o.get_int("patience");
                 e.mode = parse_monitor_mode(o.get_string("mode"), "EarlyStopping");
                 e.strict = o.get_bool("strict");
                 e.check_finite = o.get_bool("check_finite");
                 e.stopping_threshold = optional_double(o, "stopping_threshold");
                 e.divergence_threshold = optional_double(o, "divergence_threshold");
                 if (o.was_set("check_on_train_epoch_end")) e.check_on_train_epoch_end = o.get_bool("check_on_train_epoch_end");
                 e.verbose = o.get_bool("verbose");
                 return std::make_shared<EarlyStopping>(e);
               });
  registry.add("model_checkpoint", "save checkpoints during fit, keeping the best by a monitored metric",
               {{"dirpath", OptionType::String, "", "directory; '': <log dir>/checkpoints"},
                {"filename", OptionType::String, "", "template such as {epoch}-{step}-{val_acc:.3f}; '': {epoch}-{step}"},
                {"monitor", OptionType::String, "", "metric that ranks checkpoints; '': the latest is kept"},
                {"mode", OptionType::String, "min", "min or max: which direction is better"},
                {"save_top_k", OptionType::Int, "1", "keep the k best; 0: none; -1: all"},
                {"save_last", OptionType::Bool, "false", "also write last.ckpt at every save"},
                {"save_weights_only", OptionType::Bool, "false", "the model's weights only"},
                {"auto_insert_metric_name", OptionType::Bool, "true", "{epoch} becomes epoch=2"},
                {"every_n_train_steps", OptionType::Int, "0", "save every n optimizer steps (0: off)"},
                {"every_n_epochs", OptionType::Int, "", "save every n epochs (0: off; unset: 1 unless another trigger)"},
                {"train_time_interval", OptionType::String, "", "save every DD:HH:MM:SS of training (unset: off)"},
                {"save_on_train_epoch_end", OptionType::Bool, "",
                 "save at the training epoch's end (true) or after validation (false); unset: Lightning's rule"},
                {"verbose", OptionType::Bool, "false", "print every save and removal"}},
               [](const OptionValues& o) {
                 ModelCheckpointOptions m;
                 m.dirpath = o.get_string("dirpath");
                 m.filename = o.get_string("filename");
                 m.monitor = o.get_string("monitor");
                 m.mode = parse_monitor_mode(o.get_string("mode"), "ModelCheckpoint");
                 m.save_top_k = o.get_int("save_top_k");
                 m.save_last = o.get_bool("save_last");
                 m.save_weights_only = o.get_bool("save_weights_only");
                 m.auto_insert_metric_name = o.get_bool("auto_insert_metric_name");
                 m.every_n_train_steps = o.get_int("every_n_train_steps");
                 if (o.was_set("every_n_epochs")) m.every_n_epochs = o.get_int("every_n_epochs");
                 if (o.was_set("train_time_interval")) {
                   m.train_time_interval = parse_duration(o.get_string("train_time_interval"), "ModelCheckpoint");
                 }
                 if (o.was_set("save_on_train_epoch_end")) m.save_on_train_epoch_end = o.get_bool("save_on_train_epoch_end");
                 m.verbose = o.get_bool("verbose");
                 return std::make_shared<ModelCheckpoint>(m);
               });
  registry.add("learning_rate_monitor", "log each optimizer's learning rate (and momentum) to the loggers",
               {{"logging_interval", OptionType::String, "", "step, epoch, or '' for each scheduler's own"},
                {"log_momentum", OptionType::Bool, "false", "also log momentum (Adam: beta1)"},
                {"log_weight_decay", OptionType::Bool, "false", "also log weight decay"}},
               [](const OptionValues& o) {
                 return std::make_shared<LearningRateMonitor>(parse_logging_interval(o.get_string("logging_interval")),
                                                              o.get_bool("log_momentum"),
                                                              o.get_bool("log_weight_decay"));
               });
  registry.add("timer", "stop fit after a training time budget",
               {{"duration", OptionType::String, "", "DD:HH:MM:SS (required)"},
                {"interval", OptionType::String, "step", "check after every step or epoch"},
                {"verbose", OptionType::Bool, "true", "say when the time is up"}},
               [](const OptionValues& o) {
                 const auto& interval = o.get_string("interval");
                 check<ConfigurationError>(interval == "step" || interval == "epoch",
                                           "Timer: expected interval 'step' or 'epoch', got '", interval, "'");
                 return std::make_shared<Timer>(o.get_string("duration"),
                                                interval == "step" ? TimerInterval::Step : TimerInterval::Epoch,
                                                o.get_bool("verbose"));
               });
  registry.add("gradient_accumulation_scheduler", "change accumulate_grad_batches by epoch",
               {{"scheduling", OptionType::String, "", "epoch:factor pairs separated by ';' (required), e.g. 0:8;4:4"}},
               [](const OptionValues& o) {
                 return std::make_shared<GradientAccumulationScheduler>(
                     GradientAccumulationScheduler::parse(o.get_string("scheduling")));
               });
  registry.add("ema", "an exponential moving average of the weights, used for validation",
               {{"decay", OptionType::Double, "0.999", "weight of the old average per update, in [0, 1]"},
                {"update_every_n_steps", OptionType::Int, "1", "optimizer steps between updates"},
                {"validate_with_ema", OptionType::Bool, "true", "validate with the averaged weights"},
                {"apply_at_end", OptionType::Bool, "true", "leave the averaged weights in the module after fit"}},
               [](const OptionValues& o) {
                 return std::make_shared<EMA>(o.get_double("decay"), o.get_int("update_every_n_steps"),
                                              o.get_bool("validate_with_ema"), o.get_bool("apply_at_end"));
               });
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
