#pragma once
// Note [Loop state]: what the Trainer's loops and its checkpoint connector read and advance,
// gathered in one explicit object instead of the Trainer's privates. The Trainer owns it and
// hands it to the loops (FitLoop, EvaluationLoop), the CheckpointConnector and the Module's helpers
// in their LoopContext (Note [Loop context]); callbacks see it only through the Trainer's const
// accessors. A checkpoint stores the parts a resumed run needs (FitProgress, the open epoch's
// metric aggregates, callback metrics).
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
#include "trainer/loops/fit_progress.h"
#include "trainer/metrics/metric_collector.h"
#include "trainer/metrics/metric_map.h"
#include "trainer/optim/manual_optimizer.h"
#include "trainer/optim/optimizer_config.h"

namespace volt {

class Module;

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
