#include "trainer/trainer.h"

#include <filesystem>
#include <iostream>

#include "callbacks/callback_registry.h"
#include "callbacks/model_checkpoint.h"
#include "callbacks/model_summary.h"
#include "callbacks/progress_bar.h"
#include "checkpoint/last_checkpoint.h"
#include "core/collective_site.h"
#include "core/cpu_threads.h"
#include "core/reproducibility.h"
#include "core/warning.h"
#include "distributed/process_launcher.h"
#include "loggers/console_logger.h"
#include "loggers/logger_registry.h"
#include "run/run_setup.h"
#include "strategies/loaded_checkpoint.h"
#include "strategies/strategy.h"
#include "trainer/checkpoint_connector.h"
#include "trainer/loops/evaluation_loop.h"
#include "trainer/loops/fit_loop.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/loop_hooks.h"
#include "trainer/loops/loop_state.h"

namespace volt {
namespace {

// fit(module, train_loader, val_loader) as a DataModule.
class DataModuleOfLoaders : public DataModule {
 public:
  DataModuleOfLoaders(std::shared_ptr<DataLoader> train, std::shared_ptr<DataLoader> val)
      : train_(std::move(train)), val_(std::move(val)) {}
  std::shared_ptr<DataLoader> train_dataloader() override { return train_; }
  std::shared_ptr<DataLoader> val_dataloader() override { return val_; }

 private:
  std::shared_ptr<DataLoader> train_, val_;
};

// A strategy or precision handed to a constructor that takes one must be there.
template <typename T>
std::shared_ptr<T> given(std::shared_ptr<T> object, const char* what) {
  check<ConfigurationError>(object != nullptr, "Trainer: expected a ", what, ", got nullptr");
  return object;
}

}  // namespace

struct Trainer::Run {
  // Metrics are synchronized across ranks through the collectives of the strategy that
  // `placement` holds once resolved: state of this Run alone, so the LoopState never reads past
  // the strategy's owner. The ranks of one data replica (a pipeline's stages, a tensor-parallel
  // group) log the same samples' values, so a sum over the world counts each replica's once per
  // rank: it is divided by the ranks per replica (a mean, max or min is unchanged by the repeats).
  Run()
      : state([this](const torch::Tensor& value, ReduceOp op) {
          auto& strategy = *placement.strategy;
          auto reduced = strategy.collectives().all_reduce(value, op);
          const int64_t world = strategy.topology().world_size;
          const int64_t replicas = strategy.placement().data_replica().count;
          if (op != ReduceOp::Sum || replicas == world) return reduced;
          return reduced / static_cast<double>(world / replicas);
        }) {}
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  // The cluster environment, this process's devices, the launcher and the strategy, resolved at
  // construction (run_setup.h); it owns the launcher, which outlives the strategy.
  RunPlacement placement;
  CPUThreads cpu_threads;
  LoopState state;
  // What the loops, the checkpoint connector and the running Module work through (Note [Loop
  // context]); set once the strategy is resolved.
  std::optional<LoopContext> loop;
};

Trainer::Trainer(TrainerOptions options) : Trainer(std::move(options), TrainerComponents{}) {}

Trainer::Trainer(TrainerOptions options, std::shared_ptr<Strategy> strategy)
    : Trainer(std::move(options), TrainerComponents{given(std::move(strategy), "strategy"), nullptr, nullptr}) {}

Trainer::Trainer(TrainerOptions options, std::shared_ptr<Strategy> strategy, std::shared_ptr<Precision> precision)
    : Trainer(std::move(options),
              TrainerComponents{std::move(strategy), given(std::move(precision), "precision"), nullptr}) {}

Trainer::Trainer(TrainerOptions options, ProcessLauncher& launcher)
    : Trainer(std::move(options), TrainerComponents{nullptr, nullptr, &launcher}) {}

Trainer::Trainer(TrainerOptions options, TrainerComponents components)
    : options_(std::move(options)), run_(std::make_unique<Run>()) {
  options_.validate();
  // Seeded now as well as at the start of each run: a module built after the Trainer (the
  // order LightningCLI uses: seed_everything, then the model) starts from weights the seed decides.
  if (options_.seed) seed_everything(*options_.seed);
  // Everything about processes is decided now, so that a mismatch fails here, not mid-run.
  run_->placement = resolve_run(options_, std::move(components), "Trainer");
  strategy_ = run_->placement.strategy.get();
  run_->loop.emplace(LoopContext{*this, *strategy_, run_->state});
  init();
}

Trainer::~Trainer() {
  if (strategy_) strategy_->teardown();
}

void Trainer::init() {
  // fast_dev_run is a smoke test: it must leave nothing behind (Lightning's rule).
  if (options_.fast_dev_run == 0) {
    const std::map<std::string, std::string> context{{"save_dir", options_.default_root_dir}};
    for (const auto& spec : options_.loggers) loggers_.push_back(logger_registry().create(spec, context));
  }
  for (const auto& spec : options_.callbacks) callbacks_.push_back(callback_registry().create(spec));
}

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  check<ConfigurationError>(callback != nullptr, "Trainer::add_callback: expected a callback, got nullptr");
  callbacks_.push_back(std::move(callback));
}

void Trainer::add_logger(std::shared_ptr<Logger> logger) {
  check<ConfigurationError>(logger != nullptr, "Trainer::add_logger: expected a logger, got nullptr");
  if (options_.fast_dev_run == 0) loggers_.push_back(std::move(logger));
}

std::string Trainer::log_dir() const {
  // The first logger that writes files (a console logger has no directory).
  for (const auto& logger : loggers_) {
    if (!logger->log_dir().empty()) return logger->log_dir();
  }
  return options_.default_root_dir;
}

int64_t Trainer::estimated_stepping_batches() const {
  const int64_t k = run_->state.accumulate_grad_batches;
  const int64_t per_epoch = (run_->state.num_training_batches + k - 1) / k;
  const int64_t epochs = max_epochs();
  const int64_t by_epochs = epochs == -1 ? -1 : per_epoch * epochs;
  if (options_.max_steps == -1) return by_epochs;
  return by_epochs == -1 ? options_.max_steps : std::min(by_epochs, options_.max_steps);
}

void Trainer::setup(TrainerFn fn, const std::shared_ptr<Module>& module, const std::shared_ptr<DataModule>& data) {
  check<ConfigurationError>(module != nullptr, "Trainer: expected a module, got nullptr");
  check<ConfigurationError>(data != nullptr, "Trainer: expected a data module, got nullptr");
  check<ConfigurationError>(module->loop_ == nullptr || module->loop_ == &*run_->loop,
                            "Trainer: this module is already being run by another Trainer");
  run_->state.fn = fn;
  run_->state.status = TrainerStatus::Running;
  run_->state.module = module;
  run_->state.data = data;
  module->loop_ = &*run_->loop;
  if (!environment_ready_) {
    run_->cpu_threads = setup_run_environment(*strategy_, run_->placement, options_, options_.default_root_dir);
    environment_ready_ = true;
    agree_on_logger_versions();
  }
  if (options_.seed) seed_everything(*options_.seed);
  set_deterministic(options_.deterministic);
  if (fn == TrainerFn::Fitting) {
    // Defaults Lightning adds unless the user configured their own.
    if (options_.enable_model_summary && !has_callback(CallbackRole::ModelSummary)) {
      callbacks_.push_back(std::make_shared<ModelSummary>());
    }
    if (options_.enable_progress_bar && !has_callback(CallbackRole::ProgressBar)) {
      callbacks_.push_back(std::make_shared<ProgressBar>());
    }
    if (options_.enable_checkpointing && !has_callback(CallbackRole::Checkpoint)) {
      callbacks_.push_back(std::make_shared<ModelCheckpoint>());
    }
    // Checkpoints run last at every hook (Lightning's order), so that what they save includes
    // what the other callbacks did at that hook (EarlyStopping's count, for example).
    std::stable_partition(callbacks_.begin(), callbacks_.end(),
                          [](const auto& c) { return c->role() != CallbackRole::Checkpoint; });
    // Without a progress bar, epoch summaries still reach the terminal, unless the user asked for
    // no loggers at all (--logger none).
    const bool has_console =
        std::any_of(loggers_.begin(), loggers_.end(), [](const auto& l) { return l->prints_to_terminal(); });
    if (!options_.enable_progress_bar && !loggers_.empty() && !has_console) {
      loggers_.push_back(std::make_shared<ConsoleLogger>());
    }
    run_->state.accumulate_grad_batches = options_.accumulate_grad_batches;
  } else if (options_.enable_progress_bar && !has_callback(CallbackRole::ProgressBar)) {
    callbacks_.push_back(std::make_shared<ProgressBar>());
  }
  data->setup(fn);
  // Callbacks' setup first (Lightning's order), while the module is as the user built it; then
  // through the precision, to the device, and wrapped: the strategy owns that order.
  call_callbacks(*this, *module, &Callback::setup, to_string(fn));
  module->configure_model();
  strategy_->setup_module(*module);
}

bool Trainer::has_callback(CallbackRole role) const {
  return std::any_of(callbacks_.begin(), callbacks_.end(), [role](const auto& c) { return c->role() == role; });
}

void Trainer::setup_optimizers() {
  OptimizerConfig config = run_->state.module->configure_optimizers();
  config.validate();
  run_->state.optimizers = strategy_->setup_optimizers(config.optimizers);
  VOLT_INTERNAL_ASSERT(run_->state.optimizers.size() == config.optimizers.size(),
                       "a strategy returns one optimizer for each it is given");
  run_->state.schedulers = config.schedulers;
  run_->state.manual_optimizers.clear();
  for (const auto& optimizer : run_->state.optimizers) {
    run_->state.manual_optimizers.push_back(std::make_shared<ManualOptimizer>(*run_->loop, optimizer));
  }
  check<ConfigurationError>(run_->state.module->automatic_optimization() || !options_.gradient_clip_val,
                            "--gradient-clip-val: the Trainer clips only in automatic optimization; with "
                            "automatic_optimization() false, call clip_gradients(optimizer, value) in "
                            "training_step before the step");
  // A strategy may wrap an optimizer (a sharded one): its schedulers follow the wrapper, whose
  // param groups LearningRateMonitor and checkpoints see too.
  for (auto& config_entry : run_->state.schedulers) {
    for (size_t i = 0; i < config.optimizers.size(); ++i) {
      if (&config_entry.scheduler->optimizer() == config.optimizers[i].get() &&
          run_->state.optimizers[i] != config.optimizers[i]) {
        config_entry.scheduler->rebind(*run_->state.optimizers[i]);
      }
    }
  }
}

void Trainer::teardown() {
  strategy_->detach_policies();  // the model goes back as it was built, before anything may free it
  if (run_->state.module) {
    call_callbacks(*this, *run_->state.module, &Callback::teardown, to_string(run_->state.fn));
    run_->state.module->loop_ = nullptr;
  }
  run_->state.stage = RunningStage::None;
}

template <typename Body>
void Trainer::run_guarded(TrainerFn fn, const std::shared_ptr<Module>& module, const std::shared_ptr<DataModule>& data,
                          Body&& body) {
  try {
    setup(fn, module, data);
    body();
    strategy_->finish_checkpoint_writes();  // a run ends with its checkpoints on disk
    strategy_->restore_module(*run_->state.module);
    run_->state.status = TrainerStatus::Finished;
    if (loggers_active(*this)) {
      for (auto& logger : loggers_) logger->finalize(run_->state.status);
    }
    teardown();
  } catch (const std::exception& error) {
    run_->state.status = TrainerStatus::Interrupted;
    strategy_->on_exception(error);
    if (run_->state.module) {
      for (auto& callback : callbacks_) {
        try {
          callback->on_exception(*this, *run_->state.module, error);
        } catch (...) {
          // The original error is the one to report; a failing on_exception must not hide it.
        }
      }
      if (loggers_active(*this)) {
        for (auto& logger : loggers_) logger->finalize(run_->state.status);
      }
      teardown();
    }
    throw;
  }
}

void Trainer::fit(std::shared_ptr<Module> module, std::shared_ptr<DataLoader> train, std::shared_ptr<DataLoader> val,
                  const std::string& ckpt_path) {
  fit(std::move(module), std::make_shared<DataModuleOfLoaders>(std::move(train), std::move(val)), ckpt_path);
}

std::shared_ptr<DataLoader> Trainer::prepare_loader(const std::shared_ptr<DataLoader>& loader,
                                                    RunningStage stage) const {
  return strategy_->placement().distribute_loader(DataLoader::with_default_seed(loader, options_.seed.value_or(0)),
                                                  stage);
}

void Trainer::fit(std::shared_ptr<Module> module, std::shared_ptr<DataModule> data, const std::string& ckpt_path) {
  run_guarded(TrainerFn::Fitting, module, data, [&] {
    auto train = run_->state.data->train_dataloader();
    check<ConfigurationError>(train != nullptr, "Trainer::fit: the data module provides no train_dataloader()");
    auto val = run_->state.data->val_dataloader();
    // The loop resolves the batch limits first, so that configure_optimizers can read
    // estimated_stepping_batches() (e.g. for a schedule over the whole fit).
    FitLoop loop(*run_->loop, prepare_loader(train, RunningStage::Training),
                 val ? prepare_loader(val, RunningStage::Validating) : nullptr);
    setup_optimizers();
    run_->state.pending_rng_state.reset();
    run_->state.resumed_from.clear();
    const std::string& resume_from = ckpt_path.empty() ? options_.ckpt_path : ckpt_path;
    if (!resume_from.empty()) restore_checkpoint(resume_from);
    loop.run();
  });
}

std::map<std::string, double> Trainer::validate(std::shared_ptr<Module> module, std::shared_ptr<DataModule> data,
                                                const std::string& ckpt_path) {
  std::map<std::string, double> metrics;
  run_guarded(TrainerFn::Validating, module, data, [&] {
    auto loader = run_->state.data->val_dataloader();
    check<ConfigurationError>(loader != nullptr, "Trainer::validate: the data module provides no val_dataloader()");
    if (!ckpt_path.empty()) restore_checkpoint(ckpt_path);
    metrics = run_evaluation(RunningStage::Validating, prepare_loader(loader, RunningStage::Validating));
  });
  return metrics;
}

std::map<std::string, double> Trainer::test(std::shared_ptr<Module> module, std::shared_ptr<DataModule> data,
                                            const std::string& ckpt_path) {
  std::map<std::string, double> metrics;
  run_guarded(TrainerFn::Testing, module, data, [&] {
    auto loader = run_->state.data->test_dataloader();
    check<ConfigurationError>(loader != nullptr, "Trainer::test: the data module provides no test_dataloader()");
    if (!ckpt_path.empty()) restore_checkpoint(ckpt_path);
    metrics = run_evaluation(RunningStage::Testing, prepare_loader(loader, RunningStage::Testing));
  });
  return metrics;
}

std::vector<torch::Tensor> Trainer::predict(std::shared_ptr<Module> module, std::shared_ptr<DataModule> data,
                                            const std::string& ckpt_path) {
  std::vector<torch::Tensor> predictions;
  run_guarded(TrainerFn::Predicting, module, data, [&] {
    auto loader = run_->state.data->predict_dataloader();
    check<ConfigurationError>(loader != nullptr, "Trainer::predict: the data module provides no predict_dataloader()");
    if (!ckpt_path.empty()) restore_checkpoint(ckpt_path);
    EvaluationLoop loop(*run_->loop, RunningStage::Predicting, prepare_loader(loader, RunningStage::Predicting));
    predictions = loop.predict();
  });
  return predictions;
}

std::map<std::string, double> Trainer::run_evaluation(RunningStage stage, const std::shared_ptr<DataLoader>& loader) {
  EvaluationLoop loop(*run_->loop, stage, loader);
  return loop.run();
}

void Trainer::agree_on_logger_versions() {
  if (strategy_->topology().world_size == 1) return;
  for (auto& logger : loggers_) {
    const int64_t mine = strategy_->is_global_zero() ? logger->version() : 0;
    const int64_t chosen = strategy_->collectives().broadcast_int(mine);
    if (!strategy_->is_global_zero()) logger->set_version(chosen);
  }
}

void Trainer::log_metrics(const std::map<std::string, double>& metrics) { log_to_loggers(*this, run_->state, metrics); }

void Trainer::show_on_progress_bar(const std::map<std::string, double>& metrics) {
  for (const auto& [name, value] : metrics) run_->state.progress_bar_metrics.set(name, value);
}

void Trainer::set_accumulate_grad_batches(int64_t micro_batches) {
  check<ConfigurationError>(micro_batches >= 1, "Trainer: expected accumulate_grad_batches >= 1, got ", micro_batches);
  if (micro_batches == run_->state.accumulate_grad_batches) return;
  const auto& p = run_->state.progress;
  const bool resumed_epoch = run_->state.accumulation_restored_for_epoch == p.epoch;
  check<ConfigurationError>(p.window_micro_batches == 0 && p.next_batch == 0,
                            "Trainer: accumulate_grad_batches can change only at the start of an epoch "
                            "(on_train_epoch_start); asked for ",
                            micro_batches, " at epoch ", p.epoch, ", batch ", p.next_batch,
                            resumed_epoch ? std::string(", in an epoch resumed from a checkpoint written with ") +
                                                std::to_string(run_->state.accumulate_grad_batches) +
                                                " micro-batches per step: resume with the same accumulation schedule"
                                          : std::string());
  run_->state.accumulate_grad_batches = micro_batches;
}

void Trainer::save_checkpoint(const std::filesystem::path& path, bool weights_only, bool in_background) {
  const CollectiveSite site("save_checkpoint");  // Note [Diagnosing a hang]
  CheckpointConnector connector(*run_->loop);
  strategy_->save_checkpoint(connector.dump(weights_only), path, in_background);
}

void Trainer::remove_checkpoint(const std::filesystem::path& path) { strategy_->remove_checkpoint(path); }

int64_t Trainer::global_rank() const { return strategy_->topology().global_rank; }
int64_t Trainer::local_rank() const { return strategy_->topology().local_rank; }
int64_t Trainer::node_rank() const { return strategy_->topology().node_rank; }
int64_t Trainer::world_size() const { return strategy_->topology().world_size; }
int64_t Trainer::num_nodes() const { return strategy_->topology().num_nodes; }

std::filesystem::path Trainer::checkpoint_dir() const { return std::filesystem::path(log_dir()) / "checkpoints"; }

bool Trainer::restore_checkpoint(const std::string& path) {
  std::filesystem::path file = path;
  if (path == "last") {
    const LastCheckpoint last = find_last_checkpoint(options_.default_root_dir, {checkpoint_dir()});
    std::string skipped;
    for (const auto& line : last.skipped) skipped += "\n  " + line;
    // Every rank finds the same; an incomplete newer one is passed over, and said so, never loaded
    // (Note [Removing a checkpoint]); only incomplete ones is not a fresh start.
    check<CheckpointError>(!last.path.empty() || last.skipped.empty(), "ckpt_path 'last': every checkpoint under '",
                           options_.default_root_dir, "' is incomplete:", skipped,
                           "\nPass one to resume from explicitly, or remove them to start from scratch");
    if (!last.skipped.empty() && is_global_zero()) {
      warn("ckpt_path 'last': resuming from " + last.path.string() + ", the newest complete checkpoint; passed over" +
           skipped);
    }
    file = last.path;
    if (file.empty()) {
      check<CheckpointError>(run_->state.fn == TrainerFn::Fitting, "ckpt_path 'last': no checkpoint under '",
                             options_.default_root_dir, "'; pass a checkpoint file");
      if (is_global_zero()) {
        std::cerr << "volt: ckpt_path 'last': no checkpoint under '" << options_.default_root_dir
                  << "' yet; training starts from scratch" << std::endl;
      }
      return false;
    }
  }
  const CollectiveSite site("load_checkpoint");  // Note [Diagnosing a hang]
  CheckpointConnector(*run_->loop).restore(strategy_->load_checkpoint(file), "checkpoint '" + file.string() + "'");
  if (run_->state.fn == TrainerFn::Fitting) run_->state.resumed_from = file.string();
  return true;
}

const std::string& Trainer::resumed_from() const { return run_->state.resumed_from; }
int64_t Trainer::current_epoch() const { return run_->state.progress.epoch; }
int64_t Trainer::global_step() const { return run_->state.progress.global_step; }
const FitProgress& Trainer::fit_progress() const { return run_->state.progress; }
TrainerFn Trainer::fn() const { return run_->state.fn; }
RunningStage Trainer::stage() const { return run_->state.stage; }
TrainerStatus Trainer::status() const { return run_->state.status; }
bool Trainer::should_stop() const { return run_->state.should_stop; }
void Trainer::set_should_stop(bool stop) { run_->state.should_stop = stop; }
int64_t Trainer::accumulate_grad_batches() const { return run_->state.accumulate_grad_batches; }
int64_t Trainer::num_training_batches() const { return run_->state.num_training_batches; }
bool Trainer::fit_validates() const { return run_->state.fit_validates; }
int64_t Trainer::num_eval_batches() const { return run_->state.num_eval_batches; }
const std::map<std::string, double>& Trainer::callback_metrics() const { return run_->state.callback_metrics.values(); }
const std::map<std::string, double>& Trainer::logged_metrics() const { return run_->state.logged_metrics.values(); }
const std::map<std::string, double>& Trainer::progress_bar_metrics() const {
  return run_->state.progress_bar_metrics.values();
}
StrategyCollectives& Trainer::collectives() const { return strategy_->collectives(); }
const ClusterEnvironment& Trainer::cluster_environment() const { return *run_->placement.cluster; }
Precision& Trainer::precision() const { return strategy_->precision(); }
torch::Device Trainer::root_device() const { return run_->placement.device; }
const CPUThreads& Trainer::cpu_threads() const { return run_->cpu_threads; }
const std::vector<std::shared_ptr<torch::optim::Optimizer>>& Trainer::optimizers() const {
  return run_->state.optimizers;
}
const std::vector<SchedulerConfig>& Trainer::lr_schedulers() const { return run_->state.schedulers; }
bool Trainer::is_global_zero() const { return strategy_->is_global_zero(); }

}  // namespace volt
