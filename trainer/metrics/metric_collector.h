#pragma once
// Collects what a Module logs during one loop (a training epoch, a validation or test run) and
// turns it into step values and epoch aggregates with Lightning's naming: a name logged only per
// step or only per epoch keeps its name; one logged both ways becomes <name>_step and
// <name>_epoch (and <name> holds the epoch value for callbacks). Every value stays a float64
// tensor on the device it was logged from, and the aggregates are computed there: logging never
// reads a value on the host (Note [Metrics read when asked] in trainer/metrics/metric_map.h).
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "distributed/reduce_op.h"
#include "trainer/metrics/log_options.h"
#include "core/state_dict.h"
#include "core/run_stage.h"

namespace volt {

// Metrics by destination: what goes to the loggers, to the progress bar, and to callbacks
// (ModelCheckpoint / EarlyStopping monitors read `callback`, which holds everything). Each value
// is a 0-dim float64 tensor, not yet read.
struct MetricValues {
  std::map<std::string, torch::Tensor> logger;
  std::map<std::string, torch::Tensor> prog_bar;
  std::map<std::string, torch::Tensor> callback;
};

// One log() call as a captured step recorded it (Note [The Trainer's captured step]).
struct LoggedValue {
  std::string name;
  torch::Tensor value;  // the graph's output: rewritten by each replay
  LogOptions options;   // as given
};

class MetricCollector {
 public:
  // Reduces a tensor across ranks (the strategy's all_reduce; the identity on one process).
  using SyncFn = std::function<torch::Tensor(const torch::Tensor&, ReduceOp)>;
  explicit MetricCollector(SyncFn sync);

  // Starts a new loop: forgets everything logged before. `stage` decides log()'s defaults.
  void reset(RunningStage stage);
  // Whether logging now happens inside a *_step (per batch) or in an epoch-level hook.
  void set_in_step(bool in_step, int64_t batch_size = 1);
  // Marks the start of a batch: step values from the previous batch stop being "fresh".
  void begin_batch();

  // Throws ConfigurationError for an empty name, a tensor with more than one element, or a name
  // already logged in this loop with different on_step/on_epoch/reduce_fx/sync_dist.
  void log(const std::string& name, const torch::Tensor& value, const LogOptions& options);

  // While `records` is set, log() checks its arguments and appends the call there instead of
  // computing anything: a captured step's host code runs once, at capture, so the Trainer logs
  // the recorded values again after every replay. nullptr ends the recording.
  void record_into(std::vector<LoggedValue>* records) { recording_ = records; }

  // Values logged on_step during the current batch (synced per step where asked).
  MetricValues step_values() const;
  // Aggregates of everything logged on_epoch since reset(); a collective when any name uses
  // sync_dist (every rank must call it at the same point).
  MetricValues epoch_values() const;

  RunningStage stage() const { return stage_; }

  // The stage and the epoch aggregates so far, so that a run resumed mid-epoch from a checkpoint
  // reports epoch values over the whole epoch, not only the batches after the resume.
  StateDict state_dict() const;
  // Replaces stage and aggregates; throws CheckpointError for a malformed state.
  void load_state_dict(const StateDict& state);

 private:
  struct Entry {
    LogOptions options;   // on_step / on_epoch resolved
    torch::Tensor last;   // latest value, detached, float64, 0-dim
    bool fresh = false;   // logged during the current batch
    torch::Tensor total;  // Σ value·weight (Mean), Σ value (Sum), running Max/Min; undefined: none yet
    double weight = 0;    // Σ weight, for Mean
  };
  static torch::Tensor accumulate(const torch::Tensor& total, const torch::Tensor& v, double weight,
                                  ReduceFx reduce_fx);

  SyncFn sync_;
  RunningStage stage_ = RunningStage::None;
  bool in_step_ = false;
  int64_t batch_size_ = 1;
  std::map<std::string, Entry> entries_;
  std::vector<LoggedValue>* recording_ = nullptr;
};

}  // namespace volt
