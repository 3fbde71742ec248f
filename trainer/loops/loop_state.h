#pragma once
// Note [Loop state]: what the Trainer's loops and its checkpoint connector read and advance,
// gathered in one explicit object instead of the Trainer's privates. The Trainer owns it and
// hands it to the loops (FitLoop, EvaluationLoop) and to the CheckpointConnector; callbacks and
// the Module see it only through the Trainer's const accessors. A checkpoint stores the parts a
// resumed run needs (FitProgress, the open epoch's metric aggregates, callback metrics).
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/run_stage.h"
#include "core/state_dict.h"
#include "data/data_loader.h"
#include "data/data_module.h"
#include "trainer/loops/epoch_remainder.h"
#include "trainer/metrics/metric_collector.h"
#include "trainer/metrics/metric_map.h"
#include "trainer/optim/manual_optimizer.h"
#include "trainer/optim/optimizer_config.h"

namespace volt {

class Module;

// Where the fit loop stands; everything a resumed run needs to continue at the next batch.
struct FitProgress {
  int64_t epoch = 0;           // current epoch (0-based)
  int64_t global_step = 0;     // optimizer steps taken (one per accumulation window)
  int64_t next_batch = 0;      // index, within `epoch`, of the next training batch to run
  int64_t window_micro_batches = 0;  // micro-batches accumulated so far in the open window
  bool window_has_backward = false;  // whether any of them ran backward
  // Where within a batch's aftermath the loop stands, so that a run resumed from a checkpoint
  // written in a hook neither repeats nor skips work: whether the validation check due after
  // batch next_batch - 1 has begun, and whether on_train_epoch_end has run for a *finished*
  // `epoch` (whose epoch-interval schedulers then still have to step). An epoch that a stop
  // condition (max_steps, max_time, should_stop) ended before its last batch is not finished:
  // its end hooks run, but epoch_end_started stays false, so that a run resumed from a
  // checkpoint written then continues the epoch at next_batch (Note [Interrupted epochs]).
  bool validation_checked = true;
  bool epoch_end_started = false;
};

struct LoopState {
  explicit LoopState(MetricCollector::SyncFn sync) : train_collector(sync), eval_collector(sync) {}

  // What runs.
  TrainerFn fn = TrainerFn::Fitting;
  RunningStage stage = RunningStage::None;
  TrainerStatus status = TrainerStatus::Initializing;

  // What it runs on (set for the duration of fit/validate/test/predict).
  std::shared_ptr<Module> module;
  std::shared_ptr<DataModule> data;
  std::shared_ptr<DataLoader> train_loader;  // the loader the fit loop draws from
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<SchedulerConfig> schedulers;
  // The same optimizers for a module in manual optimization to step (Module::optimizers()).
  std::vector<std::shared_ptr<ManualOptimizer>> manual_optimizers;
  // The checkpoint this fit resumed from ("" when none): never deleted by volt.
  std::string resumed_from;

  // How far it got, and the limits it runs under.
  FitProgress progress;
  bool should_stop = false;
  int64_t accumulate_grad_batches = 1;
  // The epoch a mid-epoch checkpoint restored accumulate_grad_batches for (the factor in use when
  // it was written, so the interrupted epoch continues exactly); -1: none. At the next epoch's
  // start the factor returns to options().accumulate_grad_batches (and callbacks may change it).
  int64_t accumulation_restored_for_epoch = -1;
  int64_t num_training_batches = 0;
  // The rest of an epoch a checkpoint of another world size or batch size began, which the fit
  // loop draws that epoch's remaining batches from (Note [The data position across world sizes]).
  std::optional<EpochRemainder> epoch_remainder;
  int64_t num_eval_batches = 0;
  bool fit_validates = false;
  bool validation_step_defined = true;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Random states of a restored checkpoint, applied just before training resumes (after the
  // sanity check), so the next batch draws exactly what it drew in the original run.
  std::optional<StateDict> pending_rng_state;

  // Metrics: the training loop's collector, the evaluation loop's (a validation inside fit must
  // not disturb the training epoch's aggregates), and what they published.
  MetricCollector train_collector;
  MetricCollector eval_collector;
  // Read on the host only when asked (Note [Metrics read when asked]).
  MetricMap callback_metrics;
  MetricMap logged_metrics;
  MetricMap progress_bar_metrics;

  // Where Module::log goes now: the evaluation collector while an evaluation loop runs.
  MetricCollector& active_collector() {
    return stage == RunningStage::Training || stage == RunningStage::None ? train_collector : eval_collector;
  }
};

}  // namespace volt
