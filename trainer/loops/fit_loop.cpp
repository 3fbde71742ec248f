#include "trainer/loops/fit_loop.h"

#include "checkpoint/rng_state.h"
#include "trainer/loops/accumulation_window.h"
#include "trainer/loops/evaluation_loop.h"
#include "trainer/trainer.h"

namespace volt {
namespace {

// overfit_batches: the first batches of the training set, in a fixed order, for both training
// and validation (Lightning's rule), so that a model that cannot fit them shows it at once.
std::shared_ptr<DataLoader> sequential_copy(const DataLoader& loader) {
  auto options = loader.options();
  options.shuffle = false;
  return std::make_shared<DataLoader>(loader.dataset_ptr(), options);
}

}  // namespace

FitLoop::FitLoop(Trainer& trainer, std::shared_ptr<DataLoader> train, std::shared_ptr<DataLoader> val)
    : trainer_(trainer), train_(std::move(train)), val_(std::move(val)) {
  const auto& options = trainer_.options_;
  int64_t n = 0;
  if (options.fast_dev_run > 0) {
    n = std::min(options.fast_dev_run, train_->num_batches());
  } else if (!options.overfit_batches.is_zero()) {
    train_ = trainer_.prepare_loader(sequential_copy(*train_), true);
    val_ = train_;
    n = options.overfit_batches.resolve(train_->num_batches());
    val_max_batches_ = n;
  } else {
    n = options.limit_train_batches.resolve(train_->num_batches());
  }
  trainer_.num_training_batches_ = n;

  const auto& interval = options.val_check_interval;
  if (options.fast_dev_run > 0 || interval.is_fraction()) {
    const double fraction = options.fast_dev_run > 0 ? 1.0 : interval.fraction_value();
    val_check_batch_ = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n) * fraction));
  } else {
    check<ConfigurationError>(interval.count_value() <= n || n == 0, "--val-check-interval: ",
                              interval.count_value(), " batches is more than the ", n,
                              " training batches of an epoch; use a smaller count or a fraction");
    val_check_batch_ = interval.count_value();
  }
  validation_enabled_ = val_ != nullptr && (options.fast_dev_run > 0 || !options.limit_val_batches.is_zero());
  trainer_.fit_validates_ = validation_enabled_;
  trainer_.train_loader_ = train_;
}

void FitLoop::run() {
  Trainer& t = trainer_;
  Module& module = *t.module_;
  const auto& options = t.options_;
  if (auto limit = options.max_time_duration()) t.deadline_ = std::chrono::steady_clock::now() + *limit;
  if (t.loggers_active()) {
    for (auto& logger : t.loggers_) logger->log_hyperparams(module.hparams());
  }

  t.call_callbacks(&Callback::on_fit_start);
  module.on_fit_start();

  const int64_t sanity_steps = options.fast_dev_run > 0 ? 0 : options.num_sanity_val_steps;
  if (validation_enabled_ && sanity_steps != 0) {
    const int64_t cap = val_max_batches_ < 0 ? sanity_steps : std::min(sanity_steps, val_max_batches_);
    EvaluationLoop sanity(t, RunningStage::SanityChecking, val_, sanity_steps < 0 ? val_max_batches_ : cap);
    sanity.run();
    validation_enabled_ = t.validation_step_defined_;
    t.fit_validates_ = validation_enabled_;
  }

  t.stage_ = RunningStage::Training;
  module.train();
  t.call_callbacks(&Callback::on_train_start);
  if (t.pending_rng_state_) {
    load_rng_state_dict(*t.pending_rng_state_, t.strategy_->root_device());
    t.pending_rng_state_.reset();
  }
  // No training batches (limit_train_batches=0): nothing to train, like Lightning. An epoch that
  // a restored checkpoint left unfinished is finished first, whatever the limits say now. Rank 0's
  // stop decisions are agreed on before each new epoch.
  const auto& p = t.progress_;
  while (t.num_training_batches_ > 0) {
    if (p.next_batch == 0 && !p.epoch_end_started) {
      agree_on_stopping();
      if (done()) break;
    }
    run_epoch();
  }
  t.call_callbacks(&Callback::on_train_end);
  t.stage_ = RunningStage::None;

  t.call_callbacks(&Callback::on_fit_end);
  module.on_fit_end();
}

bool FitLoop::steps_exhausted() const {
  const int64_t max_steps = trainer_.options_.max_steps;
  return max_steps != -1 && trainer_.progress_.global_step >= max_steps;
}

bool FitLoop::time_exhausted() const {
  return trainer_.deadline_ && std::chrono::steady_clock::now() >= *trainer_.deadline_;
}

bool FitLoop::done() const {
  const auto& p = trainer_.progress_;
  const int64_t max_epochs = trainer_.options_.resolved_max_epochs();
  if (max_epochs != -1 && p.epoch >= max_epochs) return true;
  if (steps_exhausted() || time_up_) return true;
  return trainer_.should_stop_ && p.epoch >= trainer_.options_.min_epochs;
}

void FitLoop::agree_on_stopping() {
  Trainer& t = trainer_;
  // One process decides alone; skipping the identity broadcast also keeps the count of decisions
  // a strategy sees to the callbacks' own (EarlyStopping, Timer, ModelCheckpoint).
  if (t.strategy_->topology().world_size == 1) {
    if (t.deadline_) time_up_ = time_exhausted();
    return;
  }
  t.should_stop_ = t.strategy_->broadcast_decision(t.should_stop_);
  if (t.deadline_) time_up_ = t.strategy_->broadcast_decision(time_exhausted());
}

void FitLoop::run_epoch() {
  Trainer& t = trainer_;
  Module& module = *t.module_;
  auto& p = t.progress_;
  const int64_t n = t.num_training_batches_;
  train_->set_epoch(p.epoch);
  // A run resumed from a checkpoint written in on_train_epoch_end only finishes the epoch.
  if (!p.epoch_end_started) {
    // Resumed mid-epoch, the epoch-start hooks run again (callbacks set themselves up there).
    if (p.next_batch == 0 || t.train_collector_.stage() != RunningStage::Training) {
      t.train_collector_.reset(RunningStage::Training);
    }
    t.call_callbacks(&Callback::on_train_epoch_start);
    module.on_train_epoch_start();

    // After each batch: its validation check (unless a checkpoint written there says it began),
    // then the stop conditions. A resumed run enters with next_batch > 0 and does the same.
    while (true) {
      if (p.next_batch > 0) {
        if (!p.validation_checked) validate_if_due(p.next_batch - 1);
        agree_on_stopping();
        if (steps_exhausted() || time_up_) break;
        // should_stop set by a callback mid-epoch ends the epoch once min_epochs are behind us.
        if (t.should_stop_ && p.epoch >= t.options_.min_epochs) break;
      }
      if (p.next_batch >= n) break;
      run_batch(p.next_batch);
    }

    module.on_train_epoch_end();
    t.publish_metrics(t.train_collector_.epoch_values(), true);
    p.epoch_end_started = true;
    t.call_callbacks(&Callback::on_train_epoch_end);
  }
  if (t.loggers_active()) {
    for (auto& logger : t.loggers_) logger->log_epoch_end(module, p.epoch, p.global_step);
  }
  step_schedulers(/*epoch_interval=*/true, std::vector<bool>(t.optimizers_.size(), true));
  ++p.epoch;
  p.next_batch = 0;
  p.epoch_end_started = false;
}

void FitLoop::run_batch(int64_t batch_idx) {
  Trainer& t = trainer_;
  Module& module = *t.module_;
  auto& p = t.progress_;
  const Batch batch = t.precision_->convert_input(train_->batch(batch_idx).to(t.strategy_->root_device()));
  const auto window = accumulation_window(batch_idx, t.num_training_batches_, t.accumulate_grad_batches_);
  t.call_callbacks(&Callback::on_train_batch_start, batch, batch_idx);
  t.train_collector_.begin_batch();
  t.train_collector_.set_in_step(true, batch.size());

  torch::Tensor loss;
  {
    // Micro-batches that do not close their window accumulate without synchronizing.
    ScopeGuard no_sync = window.closes() ? ScopeGuard{} : t.strategy_->no_sync();
    {
      auto context = t.strategy_->forward_context(RunningStage::Training);
      loss = module.training_step(batch, batch_idx);
    }
    t.train_collector_.set_in_step(false);
    if (loss.defined()) {
      check<ConfigurationError>(loss.numel() == 1, "training_step: expected a scalar loss, got shape ",
                                loss.sizes());
      check<ConfigurationError>(loss.requires_grad(),
                                "training_step: the returned loss does not require grad; return a loss "
                                "computed from the module's parameters (or an undefined tensor to skip)");
      const auto scaled = loss / static_cast<double>(window.size);
      t.call_callbacks(&Callback::on_before_backward, scaled);
      module.on_before_backward(scaled);
      t.strategy_->backward(scaled);
      t.call_callbacks(&Callback::on_after_backward);
      module.on_after_backward();
      p.window_has_backward = true;
    }
    ++p.window_micro_batches;
  }

  bool stepped = false;
  if (window.closes()) {
    if (p.window_has_backward) {
      step_optimizers();
      stepped = true;
    }
    p.window_micro_batches = 0;
    p.window_has_backward = false;
  }
  p.next_batch = batch_idx + 1;
  p.validation_checked = false;

  // Metrics first, so that on_train_batch_end callbacks see this batch's values. Logging
  // cadence counts optimizer steps.
  const MetricValues step_values = t.train_collector_.step_values();
  t.publish_metrics(step_values, false);
  if (stepped && p.global_step % t.options_.log_every_n_steps == 0) {
    auto metrics = step_values.logger;
    for (const auto& [name, value] : t.precision_->metrics()) metrics[name] = value;
    for (const auto& [name, value] : t.strategy_->metrics()) metrics[name] = value;
    if (!metrics.empty()) t.log_to_loggers(metrics);
  }
  t.call_callbacks(&Callback::on_train_batch_end, loss, batch, batch_idx);
}

void FitLoop::step_optimizers() {
  Trainer& t = trainer_;
  Module& module = *t.module_;
  std::vector<bool> stepped;
  for (auto& optimizer : t.optimizers_) {
    stepped.push_back(t.strategy_->optimizer_step(*optimizer, [&](torch::optim::Optimizer& o) {
      t.call_callbacks(&Callback::on_before_optimizer_step, o);
      module.on_before_optimizer_step(o);
      clip_gradients(o);
    }));
  }
  ++t.progress_.global_step;
  t.strategy_->after_optimizer_steps(t.progress_.global_step);
  step_schedulers(/*epoch_interval=*/false, stepped);
  for (auto& optimizer : t.optimizers_) {
    t.call_callbacks(&Callback::on_before_zero_grad, *optimizer);
    module.on_before_zero_grad(*optimizer);
    t.strategy_->zero_grad(*optimizer);
  }
}

void FitLoop::clip_gradients(torch::optim::Optimizer& optimizer) {
  const auto& options = trainer_.options_;
  if (!options.gradient_clip_val) return;
  if (options.gradient_clip_algorithm == GradientClipAlgorithm::Norm) {
    trainer_.strategy_->clip_gradients_norm(optimizer, *options.gradient_clip_val);
  } else {
    trainer_.strategy_->clip_gradients_value(optimizer, *options.gradient_clip_val);
  }
}

void FitLoop::step_schedulers(bool epoch_interval, const std::vector<bool>& stepped) {
  Trainer& t = trainer_;
  const int64_t count = epoch_interval ? t.progress_.epoch + 1 : t.progress_.global_step;
  for (auto& config : t.schedulers_) {
    if ((config.interval == SchedulerInterval::Epoch) != epoch_interval) continue;
    if (count % config.frequency != 0) continue;
    // A step the precision skipped (inf/NaN gradients) does not advance its scheduler.
    bool optimizer_stepped = true;
    for (size_t i = 0; i < t.optimizers_.size(); ++i) {
      if (t.optimizers_[i].get() == &config.scheduler->optimizer()) optimizer_stepped = stepped[i];
    }
    if (optimizer_stepped) config.scheduler->step();
  }
}

void FitLoop::validate_if_due(int64_t batch_idx) {
  Trainer& t = trainer_;
  t.progress_.validation_checked = true;
  if (!validation_enabled_ || !t.validation_step_defined_) return;
  if ((t.progress_.epoch + 1) % t.options_.check_val_every_n_epoch != 0) return;
  if ((batch_idx + 1) % val_check_batch_ != 0) return;
  run_validation();
}

void FitLoop::run_validation() {
  Trainer& t = trainer_;
  EvaluationLoop validation(t, RunningStage::Validating, val_, val_max_batches_);
  validation.run();
  validation_enabled_ = t.validation_step_defined_;
  t.fit_validates_ = validation_enabled_;
}

}  // namespace volt
