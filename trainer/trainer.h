#pragma once
// volt::Trainer — owns the loop (fit / validate / test / predict), gradient accumulation,
// clipping, step and epoch limits, logging cadence and checkpoint triggers. Everything about
// other processes it delegates to its Strategy; numbers to the Strategy's Precision.
//
// One Trainer runs one thing at a time on one thread. Callbacks and the Module see its state
// through the const accessors below.
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "callbacks/callback.h"
#include "loggers/logger.h"
#include "strategies/strategy.h"
#include "data/data_module.h"
#include "trainer/metrics/metric_collector.h"
#include "trainer/module.h"
#include "trainer/trainer_options.h"
#include "core/run_stage.h"

namespace volt {

class FitLoop;
class EvaluationLoop;

// Where the fit loop stands; everything a resumed run needs to continue at the next batch.
struct FitProgress {
  int64_t epoch = 0;           // current epoch (0-based)
  int64_t global_step = 0;     // optimizer steps taken (one per accumulation window)
  int64_t next_batch = 0;      // index, within `epoch`, of the next training batch to run
  int64_t window_micro_batches = 0;  // micro-batches accumulated so far in the open window
  bool window_has_backward = false;  // whether any of them ran backward
  // Where within a batch's aftermath the loop stands, so that a run resumed from a checkpoint
  // written in a hook neither repeats nor skips work: whether the validation check due after
  // batch next_batch - 1 has begun, and whether on_train_epoch_end has run for `epoch` (whose
  // epoch-interval schedulers then still have to step).
  bool validation_checked = true;
  bool epoch_end_started = false;
};

class Trainer {
 public:
  // Validates the options and resolves every name (strategy, precision, loggers, callbacks)
  // now, so that a bad setting fails here rather than mid-run.
  explicit Trainer(TrainerOptions options = {});
  // Uses `strategy` (built in code) instead of options.strategy.
  Trainer(TrainerOptions options, std::shared_ptr<Strategy> strategy);
  // Uses `precision` (built in code, e.g. a MixedPrecision with its own GradScaler) instead of
  // resolving options.precision, which must name the same precision; a null `strategy` resolves
  // options.strategy.
  Trainer(TrainerOptions options, std::shared_ptr<Strategy> strategy, std::shared_ptr<Precision> precision);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void add_callback(std::shared_ptr<Callback> callback);
  void add_logger(std::shared_ptr<Logger> logger);

  // Trains `module` on `data`; with `ckpt_path` ("last" or a file) resumes from a checkpoint.
  void fit(std::shared_ptr<Module> module, std::shared_ptr<DataModule> data,
           const std::string& ckpt_path = "");
  void fit(std::shared_ptr<Module> module, std::shared_ptr<DataLoader> train,
           std::shared_ptr<DataLoader> val = nullptr, const std::string& ckpt_path = "");
  // Run one evaluation pass and return its epoch metrics (e.g. {"test_acc": 0.91}).
  std::map<std::string, double> validate(std::shared_ptr<Module> module, std::shared_ptr<DataModule> data,
                                         const std::string& ckpt_path = "");
  std::map<std::string, double> test(std::shared_ptr<Module> module, std::shared_ptr<DataModule> data,
                                     const std::string& ckpt_path = "");
  // predict_step's output for every batch of the predict loader, in order.
  std::vector<torch::Tensor> predict(std::shared_ptr<Module> module, std::shared_ptr<DataModule> data,
                                     const std::string& ckpt_path = "");

  // Writes a checkpoint of the whole training state (README "Checkpoints"), or with
  // `weights_only` the model's state dict and loop counters, atomically through the strategy:
  // global rank 0 writes unless the strategy shards. Valid once a model is attached (during or
  // after fit/validate/test/predict). [collective: every rank calls it]
  void save_checkpoint(const std::filesystem::path& path, bool weights_only = false);
  // Global rank 0 removes a checkpoint file (or sharded directory). [collective]
  void remove_checkpoint(const std::filesystem::path& path);
  // Where checkpoints go by default: <log_dir()>/checkpoints with a logger, else
  // <default_root_dir>/checkpoints.
  std::filesystem::path checkpoint_dir() const;

  // ---- state, for callbacks and modules
  const TrainerOptions& options() const { return options_; }
  int64_t current_epoch() const { return progress_.epoch; }
  int64_t global_step() const { return progress_.global_step; }
  const FitProgress& fit_progress() const { return progress_; }
  int64_t max_epochs() const { return options_.resolved_max_epochs(); }
  TrainerFn fn() const { return fn_; }
  RunningStage stage() const { return stage_; }
  TrainerStatus status() const { return status_; }
  bool sanity_checking() const { return stage_ == RunningStage::SanityChecking; }
  bool should_stop() const { return should_stop_; }
  // Asks the fit loop to stop at the next step boundary (once min_epochs are done).
  void set_should_stop(bool stop) { should_stop_ = stop; }
  // Micro-batches per optimizer step in the current epoch (options().accumulate_grad_batches
  // unless a callback such as GradientAccumulationScheduler changed it).
  int64_t accumulate_grad_batches() const { return accumulate_grad_batches_; }
  // Changes it from the next accumulation window on. Allowed only where no window is open and
  // the epoch has not started (on_train_epoch_start), or to the current value; throws
  // ConfigurationError otherwise or for a value < 1.
  void set_accumulate_grad_batches(int64_t micro_batches);

  // Training batches per epoch after limit_train_batches / overfit_batches / fast_dev_run.
  int64_t num_training_batches() const { return num_training_batches_; }
  // Whether the current (or last) fit validates at all: a val loader with batches and a
  // validation_step.
  bool fit_validates() const { return fit_validates_; }
  // Batches of the evaluation loop that runs now (or ran last).
  int64_t num_eval_batches() const { return num_eval_batches_; }
  // Optimizer steps the whole fit will take given its limits (-1 when unbounded).
  int64_t estimated_stepping_batches() const;

  const std::map<std::string, double>& callback_metrics() const { return callback_metrics_; }
  const std::map<std::string, double>& logged_metrics() const { return logged_metrics_; }
  const std::map<std::string, double>& progress_bar_metrics() const { return progress_bar_metrics_; }

  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return callbacks_; }
  const std::vector<std::shared_ptr<Logger>>& loggers() const { return loggers_; }
  Strategy& strategy() const { return *strategy_; }
  // Who started the processes of this run and where they meet (torchelastic, slurm, mpi, volt).
  const ClusterEnvironment& cluster_environment() const { return *cluster_; }
  Precision& precision() const { return *precision_; }
  const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers() const { return optimizers_; }
  const std::vector<SchedulerConfig>& lr_schedulers() const { return schedulers_; }
  bool is_global_zero() const { return strategy_->is_global_zero(); }
  // Directory of the first logger that writes files, or default_root_dir without one.
  std::string log_dir() const;
  // Sends `metrics` to the loggers (on global rank 0) at the current global step, with the
  // epoch added, as values the module logs are sent; for callbacks such as LearningRateMonitor.
  void log_metrics(const std::map<std::string, double>& metrics);

 private:
  friend class Module;
  friend class FitLoop;
  friend class EvaluationLoop;
  friend class CheckpointConnector;

  Trainer(TrainerOptions options, std::shared_ptr<Strategy> strategy, std::shared_ptr<Precision> precision,
          bool from_registry);
  void init(std::shared_ptr<Strategy> strategy, std::shared_ptr<Precision> precision);
  // Everything before a loop runs: environment (once), module attach, device, optimizers.
  void setup(TrainerFn fn, const std::shared_ptr<Module>& module, const std::shared_ptr<DataModule>& data);
  // configure_optimizers, through the strategy (fit only).
  void setup_optimizers();
  void teardown();
  // Runs `body` with status bookkeeping, on_exception callbacks and teardown around it.
  template <typename Body>
  void run_guarded(TrainerFn fn, const std::shared_ptr<Module>& module,
                   const std::shared_ptr<DataModule>& data, Body&& body);
  std::shared_ptr<DataLoader> prepare_loader(std::shared_ptr<DataLoader> loader, bool training) const;
  std::map<std::string, double> run_evaluation(RunningStage stage, const std::shared_ptr<DataLoader>& loader);
  // Restores what `fn_` needs from the checkpoint at `path` ("last": the newest one); returns
  // false when `path` is "last" and fit finds none (it then starts from scratch).
  bool restore_checkpoint(const std::string& path);

  // Calls `hook` on every callback, in the order they were added.
  template <typename... HookArgs, typename... Args>
  void call_callbacks(void (Callback::*hook)(Trainer&, Module&, HookArgs...), Args&&... args) {
    for (auto& callback : callbacks_) ((*callback).*hook)(*this, *module_, args...);
  }
  // Where Module::log goes now: the training loop's collector, or the evaluation loop's while
  // one runs (a validation inside fit must not disturb the training epoch's aggregates).
  MetricCollector& metric_collector();
  // Merges `values` into the trainer's metric maps and sends `values.logger` to the loggers.
  void publish_metrics(const MetricValues& values, bool to_loggers);
  void log_to_loggers(std::map<std::string, double> metrics);
  // With several processes: every rank's loggers take global rank 0's version. [collective]
  void agree_on_logger_versions();
  bool loggers_active() const;

  TrainerOptions options_;
  std::shared_ptr<const ClusterEnvironment> cluster_;  // resolved at construction
  std::shared_ptr<Strategy> strategy_;
  std::shared_ptr<Precision> precision_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<Logger>> loggers_;
  MetricCollector train_collector_;
  MetricCollector eval_collector_;

  std::shared_ptr<Module> module_;
  std::shared_ptr<DataModule> data_;
  std::shared_ptr<DataLoader> train_loader_;  // the loader the fit loop draws from (set by FitLoop)
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers_;
  std::vector<SchedulerConfig> schedulers_;
  bool environment_ready_ = false;
  bool validation_step_defined_ = true;

  TrainerFn fn_ = TrainerFn::Fitting;
  RunningStage stage_ = RunningStage::None;
  TrainerStatus status_ = TrainerStatus::Initializing;
  FitProgress progress_;
  bool should_stop_ = false;
  int64_t accumulate_grad_batches_ = 1;
  int64_t num_training_batches_ = 0;
  int64_t num_eval_batches_ = 0;
  bool fit_validates_ = false;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  // Random states of a restored checkpoint, applied just before training resumes (after the
  // sanity check), so the next batch draws exactly what it drew in the original run.
  std::optional<StateDict> pending_rng_state_;

  std::map<std::string, double> callback_metrics_;
  std::map<std::string, double> logged_metrics_;
  std::map<std::string, double> progress_bar_metrics_;
};

}  // namespace volt
