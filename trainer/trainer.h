#pragma once
// volt::Trainer — owns the loop (fit / validate / test / predict), gradient accumulation,
// clipping, step and epoch limits, logging cadence and checkpoint triggers. Everything about
// other processes, devices and dtypes it delegates to its Strategy (which holds the Precision).
//
// One Trainer runs one thing at a time on one thread. The loops and the checkpoint connector work
// on its LoopState (Note [Loop state]) through a LoopContext (Note [Loop context]); callbacks and
// the Module see that state through the const accessors below.
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "callbacks/callback.h"
#include "core/run_stage.h"
#include "data/data_module.h"
#include "loggers/logger.h"
#include "trainer/loops/fit_progress.h"
#include "trainer/module.h"
#include "trainer/trainer_options.h"

namespace volt {

// What the Trainer's accessors return by reference and a caller that uses it includes itself
// (strategies/strategy.h, core/cpu_threads.h, distributed/cluster/cluster_environment.h,
// precision/precision.h, run/run_setup.h; trainer/volt.h includes them all): this header
// stays what every callback needs.
class ClusterEnvironment;
class CPUThreads;
class Precision;
class ProcessLauncher;
class Strategy;
class StrategyCollectives;
struct TrainerComponents;

class Trainer {
 public:
  // Validates the options and resolves every name (strategy, precision, loggers, callbacks)
  // now, so that a bad setting fails here rather than mid-run.
  explicit Trainer(TrainerOptions options = {});
  Trainer(TrainerOptions options, TrainerComponents components);
  // Uses `strategy` (built in code) instead of options.strategy.
  Trainer(TrainerOptions options, std::shared_ptr<Strategy> strategy);
  // Uses `precision` (built in code) instead of resolving options.precision, which must name the
  // same precision; a null `strategy` resolves options.strategy.
  Trainer(TrainerOptions options, std::shared_ptr<Strategy> strategy, std::shared_ptr<Precision> precision);
  // Starts local ranks, when it must, through run_main's `launcher` (run_main(body(launcher))).
  Trainer(TrainerOptions options, ProcessLauncher& launcher);
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

  // Writes a checkpoint of the whole training state (docs/checkpoints.md), or with
  // `weights_only` the model's state dict and loop counters, atomically through the strategy:
  // global rank 0 writes unless the strategy shards. Valid once a model is attached (during or
  // after fit/validate/test/predict). With `in_background` the call returns once a snapshot is
  // taken and a thread writes it; the next save, load or the end of the run finishes it (Note
  // [Checkpoints written in the background]). [collective: every rank calls it]
  void save_checkpoint(const std::filesystem::path& path, bool weights_only = false, bool in_background = false);
  // Global rank 0 removes a checkpoint file (or sharded directory). [collective]
  void remove_checkpoint(const std::filesystem::path& path);
  // Where checkpoints go by default: <log_dir()>/checkpoints with a logger, else
  // <default_root_dir>/checkpoints.
  std::filesystem::path checkpoint_dir() const;
  // The checkpoint the current (or last) fit resumed from; empty when it started afresh. volt
  // never deletes it.
  const std::string& resumed_from() const;

  // ---- state, for callbacks and modules
  const TrainerOptions& options() const { return options_; }
  int64_t current_epoch() const;
  int64_t global_step() const;
  const FitProgress& fit_progress() const;
  int64_t max_epochs() const { return options_.resolved_max_epochs(); }
  TrainerFn fn() const;
  RunningStage stage() const;
  TrainerStatus status() const;
  bool sanity_checking() const { return stage() == RunningStage::SanityChecking; }
  bool should_stop() const;
  // Asks the fit loop to stop at the next step boundary (once min_epochs are done).
  void set_should_stop(bool stop);
  // Micro-batches per optimizer step in the current epoch (options().accumulate_grad_batches
  // unless a callback such as GradientAccumulationScheduler changed it).
  int64_t accumulate_grad_batches() const;
  // Changes it from the next accumulation window on. Allowed only where no window is open and
  // the epoch has not started (on_train_epoch_start), or to the current value; throws
  // ConfigurationError otherwise or for a value < 1.
  void set_accumulate_grad_batches(int64_t micro_batches);

  // Training batches per epoch after limit_train_batches / overfit_batches / fast_dev_run.
  int64_t num_training_batches() const;
  // Whether the current (or last) fit validates at all: a val loader with batches and a
  // validation_step.
  bool fit_validates() const;
  // Batches of the evaluation loop that runs now (or ran last).
  int64_t num_eval_batches() const;
  // Optimizer steps the whole fit will take given its limits (-1 when unbounded).
  int64_t estimated_stepping_batches() const;

  const std::map<std::string, double>& callback_metrics() const;
  const std::map<std::string, double>& logged_metrics() const;
  const std::map<std::string, double>& progress_bar_metrics() const;

  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return callbacks_; }
  const std::vector<std::shared_ptr<Logger>>& loggers() const { return loggers_; }
  // The strategy, read-only: its name, topology, metrics, precision. Callbacks reach the other
  // ranks through collectives(); changing the strategy is the Trainer's own loops' business
  // (Note [Loop context]).
  const Strategy& strategy() const { return *strategy_; }
  StrategyCollectives& collectives() const;
  // Who started the processes of this run and where they meet (torchelastic, slurm, mpi, volt).
  const ClusterEnvironment& cluster_environment() const;
  // The strategy's (it holds the precision).
  Precision& precision() const;
  // The device this process computes on: cuda:<local rank> with CUDA, else the CPU
  // (run/device_choice.h); chosen at construction, the strategy's root_device() once set up.
  torch::Device root_device() const;
  // The CPU threads this process computes with (core/cpu_threads.h), set when the first run starts;
  // ModelSummary prints them.
  const CPUThreads& cpu_threads() const;
  const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers() const;
  const std::vector<SchedulerConfig>& lr_schedulers() const;
  bool is_global_zero() const;
  // Where this process sits (Lightning's Trainer.global_rank, local_rank, node_rank, world_size,
  // num_nodes): its rank among all processes, on its node, its node's index, how many processes
  // and nodes the run has.
  int64_t global_rank() const;
  int64_t local_rank() const;
  int64_t node_rank() const;
  int64_t world_size() const;
  int64_t num_nodes() const;
  // Directory of the first logger that writes files, or default_root_dir without one.
  std::string log_dir() const;
  // Sends `metrics` to the loggers (on global rank 0) at the current global step, with the
  // epoch added, as values the module logs are sent; for callbacks such as LearningRateMonitor.
  void log_metrics(const std::map<std::string, double>& metrics);
  // Adds `metrics` to progress_bar_metrics(), shown at the bar's next refresh; for callbacks such
  // as ThroughputMonitor.
  void show_on_progress_bar(const std::map<std::string, double>& metrics);

 private:
  // Loggers and callbacks from the options.
  void init();
  // Everything before a loop runs: environment (once), module attach, device, optimizers.
  void setup(TrainerFn fn, const std::shared_ptr<Module>& module, const std::shared_ptr<DataModule>& data);
  // configure_optimizers, through the strategy (fit only).
  void setup_optimizers();
  // Whether one of the callbacks has `role` (Callback::role()).
  bool has_callback(CallbackRole role) const;
  void teardown();
  // Runs `body` with status bookkeeping, on_exception callbacks and teardown around it.
  template <typename Body>
  void run_guarded(TrainerFn fn, const std::shared_ptr<Module>& module,
                   const std::shared_ptr<DataModule>& data, Body&& body);
  std::map<std::string, double> run_evaluation(RunningStage stage, const std::shared_ptr<DataLoader>& loader);
  // The loader a loop of `stage` draws from: seeded by --seed unless it has a seed of its own,
  // then distributed by the strategy.
  std::shared_ptr<DataLoader> prepare_loader(const std::shared_ptr<DataLoader>& loader, RunningStage stage) const;
  // Restores what the current function needs from the checkpoint at `path` ("last": the newest
  // one); returns false when `path` is "last" and fit finds none (it then starts from scratch).
  bool restore_checkpoint(const std::string& path);
  // With several processes: every rank's loggers take global rank 0's version. [collective]
  void agree_on_logger_versions();

  // What a run works with, kept out of this header (trainer.cpp): the resolved placement, the CPU
  // threads, the LoopState and the LoopContext the loops get.
  struct Run;

  TrainerOptions options_;
  std::unique_ptr<Run> run_;
  Strategy* strategy_ = nullptr;  // run_->placement.strategy, which owns it; set once resolved
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<Logger>> loggers_;
  bool environment_ready_ = false;
};

}  // namespace volt
