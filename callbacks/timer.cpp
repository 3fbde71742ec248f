#include "callbacks/timer.h"

#include <iomanip>
#include <iostream>

#include "core/duration.h"
#include "core/error.h"
#include "trainer/trainer.h"
#include "strategies/strategy.h"

namespace volt {

const OptionSchema<TimerOptions>& TimerOptions::schema() {
  static const auto schema =
      OptionSchema<TimerOptions>("Timer")
          .option("duration", &TimerOptions::duration, duration_form(), "the training time budget", required())
          .choice("interval", &TimerOptions::interval, {{"step", TimerInterval::Step}, {"epoch", TimerInterval::Epoch}},
                  "check after every step or epoch")
          .option("verbose", &TimerOptions::verbose, "say when the time is up");
  return schema;
}

Timer::Timer(TimerOptions options) {
  options.validate();
  duration_ = *options.duration;
  interval_ = options.interval;
  verbose_ = options.verbose;
}

Timer::Timer(const std::string& duration, TimerInterval interval, bool verbose)
    : Timer(TimerOptions{parse_duration(duration, "Timer"), interval, verbose}) {}

double Timer::StageClock::elapsed() const {
  if (!start) return offset;
  return offset + std::chrono::duration<double>(end.value_or(Clock::now()) - *start).count();
}

const Timer::StageClock* Timer::find_clock(const std::string& stage) const {
  if (stage == "train") return &train_;
  if (stage == "validate") return &validate_;
  if (stage == "test") return &test_;
  throw ConfigurationError("Timer: expected stage 'train', 'validate' or 'test', got '" + stage + "'");
}

double Timer::time_elapsed(const std::string& stage) const { return find_clock(stage)->elapsed(); }

double Timer::time_remaining() const {
  return std::max(0.0, static_cast<double>(duration_.count()) - time_elapsed("train"));
}

StateDict Timer::state_dict() const {
  StateDict elapsed;
  elapsed.set("train", time_elapsed("train"));
  elapsed.set("validate", time_elapsed("validate"));
  elapsed.set("test", time_elapsed("test"));
  StateDict state;
  state.set("time_elapsed", elapsed);
  return state;
}

void Timer::load_state_dict(const StateDict& state) {
  // Only training time carries over: it is the budget this callback enforces.
  train_.offset = state.child("time_elapsed").at("train").toDouble();
}

void Timer::on_train_start(Trainer&, Module&) {
  train_.start = Clock::now();
  train_.end.reset();
}

void Timer::on_train_end(Trainer&, Module&) { train_.end = Clock::now(); }

void Timer::on_validation_start(Trainer& trainer, Module&) {
  if (!trainer.sanity_checking()) validate_.start = Clock::now(), validate_.end.reset();
}

void Timer::on_validation_end(Trainer& trainer, Module&) {
  if (!trainer.sanity_checking() && validate_.start) validate_.end = Clock::now();
}

void Timer::on_test_start(Trainer&, Module&) {
  test_.start = Clock::now();
  test_.end.reset();
}

void Timer::on_test_end(Trainer&, Module&) { test_.end = Clock::now(); }

void Timer::on_train_batch_end(Trainer& trainer, Module&, const torch::Tensor&, const Batch&, int64_t) {
  if (interval_ == TimerInterval::Step) check_time(trainer);
}

void Timer::on_train_epoch_end(Trainer& trainer, Module&) {
  if (interval_ == TimerInterval::Epoch) check_time(trainer);
}

void Timer::check_time(Trainer& trainer) {
  const double elapsed = time_elapsed("train");
  // Rank 0's clock decides: ranks that disagree by a few milliseconds must still stop together.
  const bool stop = trainer.collectives().broadcast_decision(elapsed >= static_cast<double>(duration_.count()));
  if (!stop) return;
  if (verbose_ && trainer.is_global_zero() && !trainer.should_stop()) {
    std::cout << "Timer: time limit of " << duration_.count() << " s reached after " << std::fixed
              << std::setprecision(1) << elapsed << " s of training; stopping at epoch " << trainer.current_epoch()
              << ", step " << trainer.global_step() << std::endl;
  }
  trainer.set_should_stop(true);
}

}  // namespace volt
