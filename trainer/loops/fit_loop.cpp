#include "trainer/loops/fit_loop.h"

#include "checkpoint/rng_state.h"
#include "checkpoint/state_dict_bytes.h"
#include "core/named_scope.h"
#include "run/accumulation_window.h"
#include "strategies/loaded_checkpoint.h"
#include "strategies/strategy.h"
#include "trainer/checkpoint_connector.h"
#include "trainer/loops/evaluation_loop.h"
#include "trainer/loops/loop_hooks.h"
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

FitLoop::FitLoop(const LoopContext& context, std::shared_ptr<DataLoader> train, std::shared_ptr<DataLoader> val)
    : context_(context),
      trainer_(context.trainer),
      strategy_(context.strategy),
      state_(context.state),
      train_(std::move(train)),
      val_(std::move(val)) {
  const auto& options = trainer_.options();
  int64_t n = 0;
  if (options.fast_dev_run > 0) {
    n = std::min(options.fast_dev_run, train_->num_batches());
  } else if (!options.overfit_batches.is_zero()) {
    train_ = strategy_.placement().distribute_loader(sequential_copy(*train_), RunningStage::Training);
    val_ = train_;
    n = options.overfit_batches.resolve(train_->num_batches());
    val_max_batches_ = n;
  } else {
    n = options.limit_train_batches.resolve(train_->num_batches());
  }
  state_.num_training_batches = n;

  const auto& interval = options.val_check_interval;
  if (options.fast_dev_run > 0 || interval.is_fraction()) {
    const double fraction = options.fast_dev_run > 0 ? 1.0 : interval.fraction_value();
    val_check_batch_ = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n) * fraction));
  } else {
    check<ConfigurationError>(interval.count_value() <= n || n == 0, "--val-check-interval: ", interval.count_value(),
                              " batches is more than the ", n,
                              " training batches of an epoch; use a smaller count or a fraction");
    val_check_batch_ = interval.count_value();
  }
  validation_enabled_ = val_ != nullptr && (options.fast_dev_run > 0 || !options.limit_val_batches.is_zero());
  state_.fit_validates = validation_enabled_;
  state_.train_loader = train_;
}

void FitLoop::run() {
  Trainer& t = trainer_;
  Module& module = *state_.module;
  const auto& options = t.options();
  if (auto limit = options.max_time_duration()) state_.deadline = std::chrono::steady_clock::now() + *limit;
  if (loggers_active(t)) {
    for (auto& logger : t.loggers()) logger->log_hyperparams(module.hparams());
  }

  // Refused before anything runs (Note [The Trainer's captured step]).
  if (options.cuda_graph) {
    captured_ = std::make_unique<CapturedTraining>(strategy_, module.automatic_optimization(), state_.optimizers,
                                                   state_.train_collector);
  }
  call_callbacks(t, module, &Callback::on_fit_start);
  module.on_fit_start();

  const int64_t sanity_steps = options.fast_dev_run > 0 ? 0 : options.num_sanity_val_steps;
  if (validation_enabled_ && sanity_steps != 0) {
    const int64_t cap = val_max_batches_ < 0 ? sanity_steps : std::min(sanity_steps, val_max_batches_);
    EvaluationLoop sanity(context_, RunningStage::SanityChecking, val_, sanity_steps < 0 ? val_max_batches_ : cap);
    sanity.run();
    validation_enabled_ = state_.validation_step_defined;
    state_.fit_validates = validation_enabled_;
  }

  state_.stage = RunningStage::Training;
  module.train();
  call_callbacks(t, module, &Callback::on_train_start);
  apply_pending_rng_state();
  if (!options.fault_tolerance.empty()) replicas_ = make_replicas();
  // No training batches (limit_train_batches=0): nothing to train, like Lightning. An epoch that
  // a restored checkpoint left unfinished is finished first, whatever the limits say now. Rank 0's
  // stop decisions are agreed on before each new epoch.
  const auto& p = state_.progress;
  while (state_.num_training_batches > 0) {
    if (p.next_batch == 0 && !p.epoch_end_started) {
      agree_on_stopping();
      if (done()) break;
    }
    if (run_epoch() == EpochEnd::Stopped) break;
  }
  if (replicas_ && strategy_.is_global_zero()) {
    // One line a user (and the fault-tolerance test) reads: how much of the run this replica kept.
    std::cerr << "volt: fault tolerance: replica " << replicas_->replica() << " committed "
              << replicas_->steps_committed() << " of the " << replicas_->steps_taken()
              << " steps it took part in, healed " << replicas_->heals() << " time(s); last quorum #"
              << replicas_->last_quorum() << std::endl;
  }
  call_callbacks(t, module, &Callback::on_train_end);
  state_.stage = RunningStage::None;

  call_callbacks(t, module, &Callback::on_fit_end);
  module.on_fit_end();
}

bool FitLoop::steps_exhausted() const {
  const int64_t max_steps = trainer_.options().max_steps;
  return max_steps != -1 && state_.progress.global_step >= max_steps;
}

bool FitLoop::time_exhausted() const { return state_.deadline && std::chrono::steady_clock::now() >= *state_.deadline; }

// Note [Stopping before min_epochs]: Lightning's rule. should_stop (EarlyStopping, Timer, any
// callback) and --max-time, which Lightning implements as a Timer that sets should_stop, end the
// fit only once min_epochs epochs are done; --max-steps and --max-epochs end it regardless.
bool FitLoop::stop_requested() const {
  return (state_.should_stop || time_up_) && state_.progress.epoch >= trainer_.options().min_epochs;
}

bool FitLoop::done() const {
  const int64_t max_epochs = trainer_.options().resolved_max_epochs();
  if (max_epochs != -1 && state_.progress.epoch >= max_epochs) return true;
  return steps_exhausted() || stop_requested();
}

void FitLoop::agree_on_stopping() {
  // One process decides alone; skipping the identity broadcast also keeps the count of decisions
  // a strategy sees to the callbacks' own (EarlyStopping, Timer, ModelCheckpoint).
  if (strategy_.topology().world_size == 1) {
    if (state_.deadline) time_up_ = time_exhausted();
    return;
  }
  state_.should_stop = strategy_.collectives().broadcast_decision(state_.should_stop);
  if (state_.deadline) time_up_ = strategy_.collectives().broadcast_decision(time_exhausted());
}

// Note [Interrupted epochs]: a stop condition (max_steps, max_time, should_stop) that ends an
// epoch before its last batch interrupts it: the epoch-end hooks run (callbacks save checkpoints
// and loggers get the epoch's metrics so far, as in Lightning), but the epoch is not finished: its
// epoch-interval schedulers do not step, the epoch counter stays, and the progress keeps
// epoch_end_started false. A run resumed from a checkpoint written then (or after the fit)
// therefore continues the same epoch at next_batch and trains exactly like a run that was never
// stopped (Lightning would start the next epoch, skipping the rest of this one).
FitLoop::EpochEnd FitLoop::run_epoch() {
  Trainer& t = trainer_;
  Module& module = *state_.module;
  auto& p = state_.progress;
  train_->set_epoch(p.epoch);
  if (state_.epoch_remainder && state_.epoch_remainder->epoch != p.epoch) state_.epoch_remainder.reset();
  const int64_t n = epoch_batches();
  // A run resumed from a checkpoint written in on_train_epoch_end of a finished epoch only
  // finishes that epoch.
  bool finished = true;
  if (!p.epoch_end_started) {
    // Resumed mid-epoch, the epoch-start hooks run again (callbacks set themselves up there).
    if (p.next_batch == 0 || state_.train_collector.stage() != RunningStage::Training) {
      state_.train_collector.reset(RunningStage::Training);
    }
    // A factor restored for an interrupted epoch ends with it.
    if (state_.accumulation_restored_for_epoch >= 0 && state_.accumulation_restored_for_epoch < p.epoch) {
      state_.accumulate_grad_batches = t.options().accumulate_grad_batches;
      state_.accumulation_restored_for_epoch = -1;
    }
    call_callbacks(t, module, &Callback::on_train_epoch_start);
    module.on_train_epoch_start();

    // The epoch's batches from where it stands to its end, built ahead on the loader's workers
    // (Note [Batches built on worker threads]) and uploaded ahead (Note [Uploading the next batch
    // during the step]); a stop condition abandons the rest.
    // A fault-tolerant replica opens one for each step's batch instead (run_replica_step).
    std::optional<DeviceFeed> feed;
    if (!replicas_) feed.emplace(open_feed(p.next_batch, n));
    // After each batch: its validation check (unless a checkpoint written there says it began),
    // then the stop conditions. A resumed run enters with next_batch > 0 and does the same.
    while (true) {
      if (p.next_batch > 0) {
        if (!p.validation_checked) validate_if_due(p.next_batch - 1);
        agree_on_stopping();
        if (steps_exhausted() || stop_requested()) break;
      }
      if (p.next_batch >= n) break;
      if (!replicas_) {
        run_batch(p.next_batch, *feed);
      } else if (!run_replica_step(n)) {
        return EpochEnd::Healed;
      }
    }

    finished = p.next_batch >= n;
    module.on_train_epoch_end();
    publish_metrics(t, state_, state_.train_collector.epoch_values(), true);
    p.epoch_end_started = finished;
    call_callbacks(t, module, &Callback::on_train_epoch_end);
  }
  if (loggers_active(t)) {
    for (auto& logger : t.loggers()) logger->log_epoch_end(module, p.epoch, p.global_step);
  }
  if (!finished) return EpochEnd::Stopped;
  step_schedulers(/*epoch_interval=*/true, std::vector<bool>(state_.optimizers.size(), true));
  ++p.epoch;
  p.next_batch = 0;
  p.epoch_end_started = false;
  return EpochEnd::Finished;
}

std::unique_ptr<FaultTolerantReplicas> FitLoop::make_replicas() {
  check<ConfigurationError>(state_.module->automatic_optimization(),
                            "--fault-tolerance: a replica step is the Trainer's own (one batch, the quorum's average, "
                            "one optimizer step); automatic_optimization() is false in this module, so drop "
                            "--fault-tolerance or let the Trainer step the optimizers");
  FaultTolerantReplicas::StateTransfer transfer{
      .dump = [this] { return state_dict_to_bytes(CheckpointConnector(context_).dump(/*weights_only=*/false)); },
      .restore =
          [this](const std::string& bytes) {
            const std::string source = "the training state of an up-to-date replica";
            CheckpointConnector(context_).restore(LoadedCheckpoint{state_dict_from_bytes(bytes, source), nullptr},
                                                  source);
            // Training is under way: the random states continue from the source's at once.
            apply_pending_rng_state();
          },
  };
  return std::make_unique<FaultTolerantReplicas>(FaultToleranceOptions::parse(trainer_.options().fault_tolerance),
                                                 strategy_, *state_.module, std::move(transfer));
}

bool FitLoop::run_replica_step(int64_t epoch_batches) {
  auto& p = state_.progress;
  replica_first_batch_ = p.next_batch;
  replica_step_ = replicas_->begin_step(p.global_step, p.next_batch, epoch_batches);
  if (replica_step_.healed) return false;
  const int64_t mine = replica_step_.batches.mine;
  if (replica_step_.ok && mine >= 0) {
    DeviceFeed feed = open_feed(mine, mine + 1);
    run_batch(mine, feed);
    return true;
  }
  // No batch for this replica (the epoch's last step), or a step that cannot commit: the
  // quorum's average and, if it commits, the same optimizer step as the others.
  if (finish_replica_step()) {
    step_optimizers();
    p.validation_checked = false;
  }
  return true;
}

bool FitLoop::finish_replica_step() {
  auto& p = state_.progress;
  const bool commit = replicas_->finish_step(state_.optimizers);
  if (commit) {
    p.next_batch = replica_first_batch_ + replica_step_.batches.trained;
  } else {
    p.next_batch = replica_first_batch_;
    zero_gradients();
  }
  return commit;
}

void FitLoop::apply_pending_rng_state() {
  if (!state_.pending_rng_state) return;
  load_rng_state_dict(*state_.pending_rng_state, strategy_.root_device());
  state_.pending_rng_state.reset();
}

const EpochRemainder* FitLoop::remainder() const {
  const auto& r = state_.epoch_remainder;
  return r && r->epoch == state_.progress.epoch ? &*r : nullptr;
}

int64_t FitLoop::epoch_batches() const {
  const EpochRemainder* r = remainder();
  return r ? r->first_batch + r->loader->num_batches() : state_.num_training_batches;
}

DeviceFeed FitLoop::open_feed(int64_t first, int64_t end) {
  if (const EpochRemainder* rest = remainder()) {
    return DeviceFeed::open(*rest->loader, first - rest->first_batch, end - rest->first_batch, strategy_);
  }
  return DeviceFeed::open(*train_, first, end, strategy_);
}

void FitLoop::run_batch(int64_t batch_idx, DeviceFeed& feed) {
  NamedScope scope("volt::train_batch");
  Trainer& t = trainer_;
  Module& module = *state_.module;
  auto& p = state_.progress;
  const EpochRemainder* rest = remainder();
  VOLT_INTERNAL_ASSERT(feed.next_index() == batch_idx - (rest ? rest->first_batch : 0), "the feed is at batch ",
                       feed.next_index(), ", the loop at ", batch_idx);
  const Batch batch = feed.next();
  // Manual optimization: training_step runs backward and steps itself (ManualOptimizer), and
  // accumulates by hand; the window is then always the one batch.
  const bool manual = !module.automatic_optimization();
  check<ConfigurationError>(!manual || state_.accumulate_grad_batches == 1,
                            "accumulate_grad_batches=", state_.accumulate_grad_batches,
                            ": the Trainer accumulates only in automatic optimization; with "
                            "automatic_optimization() false, accumulate in training_step (toggle_model(false) "
                            "on the micro-batches that should not synchronize, step every k batches)");
  const auto window = accumulation_window(batch_idx, epoch_batches(), state_.accumulate_grad_batches);
  const int64_t steps_before = p.global_step;
  call_callbacks(t, module, &Callback::on_train_batch_start, batch, batch_idx);
  state_.train_collector.begin_batch();
  state_.train_collector.set_in_step(true, batch.size());

  // The micro-step: training_step, then backward of its loss scaled to the window. Everything
  // here is device work or runs at capture only under --cuda-graph (Note [The Trainer's captured
  // step]); the loop's own bookkeeping follows outside it.
  auto micro_step = [&](const Batch& input) {
    auto step_loss =
        strategy_.run_step(RunningStage::Training, module, input, [&](torch::nn::Module& given, const Batch& b) {
          NamedScope step("volt::training_step");
          return step_module(given, module).training_step(b, batch_idx);
        });
    state_.train_collector.set_in_step(false);
    if (step_loss.defined() && !manual) {
      check<ConfigurationError>(step_loss.numel() == 1, "training_step: expected a scalar loss, got shape ",
                                step_loss.sizes());
      check<ConfigurationError>(step_loss.requires_grad(),
                                "training_step: the returned loss does not require grad; return a loss "
                                "computed from the module's parameters (or an undefined tensor to skip)");
      // Dividing by 1 changes no bit of the loss or its gradient, and would cost two kernels and
      // an autograd node per step.
      const auto scaled = window.size == 1 ? step_loss : step_loss / static_cast<double>(window.size);
      backward_with_hooks(context_, module, scaled);
    }
    return step_loss;
  };
  torch::Tensor loss;
  {
    // Micro-batches that do not close their window accumulate without synchronizing.
    ScopeGuard no_sync = window.closes() ? ScopeGuard{} : strategy_.gradients().no_sync();
    loss = captured_ ? captured_->micro_step(batch, window.closes(), window.size, micro_step) : micro_step(batch);
    state_.train_collector.set_in_step(false);
    ++p.window_micro_batches;
  }
  const bool backward_ran = loss.defined() && !manual;
  if (backward_ran) p.window_has_backward = true;

  bool stepped = false;
  if (manual) {
    stepped = p.global_step != steps_before;
  } else if (window.closes()) {
    // Note [A window that closes without backward]: the micro-batches before it accumulated
    // under no_sync, and the closing one, which would have synchronized, ran no backward. Every
    // rank sees the same (training_step decides per batch index, the same on every rank, or the
    // ranks' collectives in backward would not match either); the strategy synchronizes now,
    // so that no rank steps on gradients it alone computed, on the path a backward would have
    // taken where it has one (DDP: the comm hook, its group and its iteration count).
    if (p.window_has_backward && !backward_ran) strategy_.gradients().synchronize_accumulated_gradients(module);
    if (replicas_) {
      // Every member averages, with or without a backward (a batch skipped gives zeros).
      stepped = finish_replica_step();
      if (stepped) step_optimizers();
    } else if (p.window_has_backward) {
      step_optimizers();
      stepped = true;
    }
  }
  if (window.closes()) {
    p.window_micro_batches = 0;
    p.window_has_backward = false;
  }
  if (!replicas_) p.next_batch = batch_idx + 1;
  // A replica step that did not commit leaves the position, whose validation check is done.
  if (!replicas_ || stepped) p.validation_checked = false;

  // Metrics first, so that on_train_batch_end callbacks see this batch's values. Logging
  // cadence counts optimizer steps.
  const MetricValues step_values = state_.train_collector.step_values();  // not read yet
  publish_metrics(t, state_, step_values, false);
  // A manual training_step may take several steps (one per optimizer): log when a multiple of
  // log_every_n_steps was reached.
  const int64_t every = t.options().log_every_n_steps;
  if (stepped && p.global_step / every != steps_before / every) {
    NamedScope logging("volt::loggers");
    auto metrics = read_metrics(step_values.logger);
    {
      // The strategy's and the precision's counters (the GradScaler's scale) are read on the host
      // for the logger too.
      NamedScope reading("volt::read_metrics");
      for (const auto& [name, value] : strategy_.metrics()) metrics[name] = value;
    }
    if (replicas_) {
      metrics["fault_tolerance/quorum"] = static_cast<double>(replica_step_.quorum);
      metrics["fault_tolerance/members"] = static_cast<double>(replica_step_.members);
      metrics["fault_tolerance/steps_committed"] = static_cast<double>(replicas_->steps_committed());
      metrics["fault_tolerance/heals"] = static_cast<double>(replicas_->heals());
    }
    if (!metrics.empty()) log_to_loggers(t, state_, metrics);
  }
  NamedScope callbacks("volt::on_train_batch_end");
  call_callbacks(t, module, &Callback::on_train_batch_end, loss, batch, batch_idx);
}

void FitLoop::step_optimizers() {
  if (captured_) return step_optimizers_captured();
  Module& module = *state_.module;
  std::vector<bool> stepped;
  for (auto& optimizer : state_.optimizers) {
    stepped.push_back(step_optimizer_with_hooks(context_, module, *optimizer,
                                                [&](torch::optim::Optimizer& o) { clip_gradients(o); }));
  }
  ++state_.progress.global_step;
  {
    NamedScope scope("volt::after_optimizer_steps");
    strategy_.after_optimizer_steps(state_.progress.global_step);
  }
  step_schedulers(/*epoch_interval=*/false, stepped);
  zero_gradients();
}

// The same work in an order a graph can hold: the steps, the precision's update (the strategy's
// after_optimizer_steps; check_supported admits only strategies that do nothing else there) and
// zero_grad are one phase; the step count and the schedulers, host work, follow it.
void FitLoop::step_optimizers_captured() {
  Module& module = *state_.module;
  const int64_t next_step = state_.progress.global_step + 1;
  const auto stepped = captured_->optimizer_step(
      [&] {
        for (auto& optimizer : state_.optimizers) {
          step_optimizer_with_hooks(context_, module, *optimizer,
                                    [&](torch::optim::Optimizer& o) { clip_gradients(o); });
        }
        {
          NamedScope scope("volt::after_optimizer_steps");
          strategy_.after_optimizer_steps(next_step);
        }
        zero_gradients();
      },
      /*need_decision=*/steps_a_scheduler(next_step));
  state_.progress.global_step = next_step;
  step_schedulers(/*epoch_interval=*/false, stepped);
}

void FitLoop::zero_gradients() {
  Trainer& t = trainer_;
  Module& module = *state_.module;
  for (auto& optimizer : state_.optimizers) {
    call_in_step_callbacks(t, module, "on_before_zero_grad", &Callback::on_before_zero_grad, *optimizer);
    probe_in_step_hook(the_module, "on_before_zero_grad", [&] { module.on_before_zero_grad(*optimizer); });
    strategy_.gradients().zero_grad(*optimizer);
  }
}

bool FitLoop::steps_a_scheduler(int64_t global_step) const {
  for (const auto& config : state_.schedulers) {
    if (config.interval == SchedulerInterval::Step && global_step % config.frequency == 0) return true;
  }
  return false;
}

void FitLoop::clip_gradients(torch::optim::Optimizer& optimizer) {
  const auto& options = trainer_.options();
  if (!options.gradient_clip_val) return;
  volt::clip_gradients(strategy_, optimizer, *options.gradient_clip_val, options.gradient_clip_algorithm);
}

void FitLoop::step_schedulers(bool epoch_interval, const std::vector<bool>& stepped) {
  // In manual optimization the module steps its schedulers itself (Module::lr_schedulers()).
  if (!state_.module->automatic_optimization()) return;
  NamedScope scope("volt::lr_schedulers");
  const int64_t count = epoch_interval ? state_.progress.epoch + 1 : state_.progress.global_step;
  for (auto& config : state_.schedulers) {
    if ((config.interval == SchedulerInterval::Epoch) != epoch_interval) continue;
    if (count % config.frequency != 0) continue;
    // A step the precision skipped (inf/NaN gradients) does not advance its scheduler.
    bool optimizer_stepped = true;
    for (size_t i = 0; i < state_.optimizers.size(); ++i) {
      if (state_.optimizers[i].get() == &config.scheduler->optimizer()) optimizer_stepped = stepped[i];
    }
    if (optimizer_stepped) config.scheduler->step();
  }
}

void FitLoop::validate_if_due(int64_t batch_idx) {
  state_.progress.validation_checked = true;
  if (!validation_enabled_ || !state_.validation_step_defined) return;
  if ((state_.progress.epoch + 1) % trainer_.options().check_val_every_n_epoch != 0) return;
  // Once per epoch means after its last batch, also in a remainder of another length.
  const bool once_per_epoch = val_check_batch_ == state_.num_training_batches;
  if (once_per_epoch ? batch_idx + 1 != epoch_batches() : (batch_idx + 1) % val_check_batch_ != 0) return;
  run_validation();
}

void FitLoop::run_validation() {
  EvaluationLoop validation(context_, RunningStage::Validating, val_, val_max_batches_);
  validation.run();
  validation_enabled_ = state_.validation_step_defined;
  state_.fit_validates = validation_enabled_;
}

}  // namespace volt
