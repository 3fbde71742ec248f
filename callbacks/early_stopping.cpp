#include "callbacks/early_stopping.h"

#include <cmath>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "trainer/trainer.h"
#include "strategies/strategy.h"

namespace volt {

const OptionSchema<EarlyStoppingOptions>& EarlyStoppingOptions::schema() {
  using O = EarlyStoppingOptions;
  const auto finite = [](double value) { return std::isfinite(value); };
  static const auto schema =
      OptionSchema<O>("EarlyStopping")
          .option("monitor", &O::monitor, "metric to watch (required), e.g. val_loss",
                  satisfies([](const std::string& name) { return !name.empty(); }, "a metric name"))
          .option("min_delta", &O::min_delta, "an improvement must exceed this",
                  satisfies([](double d) { return std::isfinite(d) && d >= 0; }, "a finite value >= 0"))
          .option("patience", &O::patience, "checks without improvement before stopping", at_least(0))
          .choice("mode", &O::mode, monitor_modes(), "which direction is better")
          .option("strict", &O::strict, "a metric that was not logged is an error")
          .option("check_finite", &O::check_finite, "stop when the metric is NaN or infinite")
          .option("stopping_threshold", &O::stopping_threshold, "stop once the metric is better than this",
                  satisfies(finite, "a finite number"))
          .option("divergence_threshold", &O::divergence_threshold, "stop once the metric is worse than this",
                  satisfies(finite, "a finite number"))
          .option("check_on_train_epoch_end", &O::check_on_train_epoch_end,
                  "check after each training epoch (true) or validation (false); unset: Lightning's rule")
          .option("verbose", &O::verbose, "print improvements and the stop reason");
  return schema;
}

EarlyStopping::EarlyStopping(EarlyStoppingOptions options)
    : options_(std::move(options)), best_score_(worst_value(options_.mode)) {
  options_.validate();
}

std::string EarlyStopping::state_key() const {
  return "EarlyStopping{monitor=" + options_.monitor + ",mode=" + to_string(options_.mode) + "}";
}

StateDict EarlyStopping::state_dict() const {
  StateDict state;
  state.set("wait_count", wait_count_);
  state.set("stopped_epoch", stopped_epoch_);
  state.set("best_score", best_score_);
  state.set("patience", options_.patience);
  return state;
}

void EarlyStopping::load_state_dict(const StateDict& state) {
  wait_count_ = state.at("wait_count").toInt();
  stopped_epoch_ = state.at("stopped_epoch").toInt();
  best_score_ = state.at("best_score").toDouble();
}

void EarlyStopping::setup(Trainer& trainer, Module&, const std::string&) {
  const auto& o = trainer.options();
  check_on_train_epoch_end_ = options_.check_on_train_epoch_end.value_or(
      o.val_check_interval.is_fraction() && o.val_check_interval.fraction_value() == 1.0 &&
      o.check_val_every_n_epoch == 1);
}

void EarlyStopping::on_validation_end(Trainer& trainer, Module&) {
  if (!check_on_train_epoch_end_) run_check(trainer);
}

void EarlyStopping::on_train_epoch_end(Trainer& trainer, Module&) {
  if (check_on_train_epoch_end_) run_check(trainer);
}

void EarlyStopping::run_check(Trainer& trainer) {
  if (trainer.fn() != TrainerFn::Fitting || trainer.sanity_checking()) return;
  const auto current = monitored_value(trainer, options_.monitor);
  if (!current) {
    check<ConfigurationError>(!options_.strict, "EarlyStopping: the monitored metric '", options_.monitor,
                              "' was not logged; available: ", available_metrics(trainer),
                              ". Log it (module.log) or monitor one of these; strict=false skips the check");
    return;
  }
  std::string reason;
  bool stop = evaluate(*current, reason);
  // Rank 0 decides for everyone: ranks whose metrics differ must still stop together.
  stop = trainer.collectives().broadcast_decision(stop);
  if (options_.verbose && trainer.is_global_zero() && !reason.empty()) std::cout << reason << std::endl;
  if (stop) {
    trainer.set_should_stop(true);
    stopped_epoch_ = trainer.current_epoch();
    stop_reason_ = reason;
  }
}

bool EarlyStopping::evaluate(double current, std::string& reason) {
  const MonitorMode mode = options_.mode;
  const std::string& name = options_.monitor;
  std::ostringstream out;
  bool stop = false;
  if (options_.check_finite && !std::isfinite(current)) {
    out << "EarlyStopping: " << name << " = " << current << " is not finite; previous best " << best_score_
        << ". Stopping.";
    stop = true;
  } else if (options_.stopping_threshold && is_better(current, *options_.stopping_threshold, mode)) {
    out << "EarlyStopping: " << name << " = " << current << " reached the stopping threshold "
        << *options_.stopping_threshold << ". Stopping.";
    stop = true;
  } else if (options_.divergence_threshold && is_better(*options_.divergence_threshold, current, mode)) {
    out << "EarlyStopping: " << name << " = " << current << " is worse than the divergence threshold "
        << *options_.divergence_threshold << ". Stopping.";
    stop = true;
  } else if (is_better(mode == MonitorMode::Min ? current + options_.min_delta : current - options_.min_delta,
                       best_score_, mode)) {
    out << "EarlyStopping: " << name << " improved to " << current;
    if (std::isfinite(best_score_)) out << " (by " << std::abs(best_score_ - current) << ")";
    best_score_ = current;
    wait_count_ = 0;
  } else {
    ++wait_count_;
    if (wait_count_ >= options_.patience) {
      out << "EarlyStopping: " << name << " did not improve in the last " << wait_count_
          << " checks; best " << best_score_ << ". Stopping.";
      stop = true;
    }
  }
  reason = out.str();
  return stop;
}

}  // namespace volt
