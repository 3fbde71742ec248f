#pragma once
#include <memory>

#include "data/data_loader.h"
#include "run/fault_tolerance/fault_tolerant_replicas.h"
#include "strategies/device_feed.h"
#include "trainer/graph/captured_training.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/loop_state.h"

namespace volt {


// Epochs of training batches with validation checks in between: sanity check, then for each
// epoch its batches (accumulation windows, optimizer steps, schedulers, logging cadence), then
// epoch-end validation, hooks and schedulers, until a limit or should_stop ends the fit.
// Reads and advances the LoopState's progress, so a restored progress continues at the next batch.
class FitLoop {
 public:
  // `train` and `val` are the loaders as the strategy distributed them.
  FitLoop(const LoopContext& context, std::shared_ptr<DataLoader> train, std::shared_ptr<DataLoader> val);
  void run();

 private:
  enum class EpochEnd {
    Finished,
    Stopped,  // a stop condition ended it before its last batch (Note [Interrupted epochs])
    Healed,   // a fault-tolerant replica took another's state: the loop continues from it
  };
  // Runs (the rest of) the current epoch.
  EpochEnd run_epoch();
  // One step of a fault-tolerant replica (Note [Fault-tolerant replicas]): the quorum, a heal or
  // the replica batch it deals, the step if it commits. Returns false when this replica healed.
  bool run_replica_step(int64_t epoch_batches);
  // The replica step's end, after its backward: whether it commits (FaultTolerantReplicas::finish_step);
  // when it does not, the gradients are discarded. Sets the position the epoch continues from.
  bool finish_replica_step();
  std::unique_ptr<FaultTolerantReplicas> make_replicas();
  // The random states a restored checkpoint left in LoopState::pending_rng_state, loaded now.
  void apply_pending_rng_state();
  // The current epoch's batches [first, end) (of the epoch, or of its remainder) on the device.
  DeviceFeed open_feed(int64_t first, int64_t end);
  void run_batch(int64_t batch_idx, DeviceFeed& feed);
  // The current epoch's remainder, when it is one (Note [The data position across world sizes]).
  const EpochRemainder* remainder() const;
  // The current epoch's batch count: num_training_batches, or where its remainder ends.
  int64_t epoch_batches() const;
  void step_optimizers();
  // step_optimizers under --cuda-graph (Note [The Trainer's captured step]).
  void step_optimizers_captured();
  // The on_before_zero_grad hooks and zero_grad of every optimizer.
  void zero_gradients();
  // Whether a step-interval scheduler steps after optimizer step `global_step`.
  bool steps_a_scheduler(int64_t global_step) const;
  void clip_gradients(torch::optim::Optimizer& optimizer);
  void step_schedulers(bool epoch_interval, const std::vector<bool>& stepped);
  void validate_if_due(int64_t batch_idx);
  void run_validation();
  // Whether the loop must end now: limits reached, or a stop requested with min_epochs satisfied.
  bool done() const;
  // should_stop or --max-time, once min_epochs epochs are done (Note [Stopping before min_epochs]).
  bool stop_requested() const;
  bool steps_exhausted() const;
  bool time_exhausted() const;
  // Makes every rank take global rank 0's stop decisions (should_stop, max_time), so that no rank
  // leaves the loop while the others wait for it in a collective. [collective]
  void agree_on_stopping();

  const LoopContext& context_;
  Trainer& trainer_;  // context_.trainer, for the hooks
  Strategy& strategy_;
  LoopState& state_;
  std::shared_ptr<DataLoader> train_;
  std::shared_ptr<DataLoader> val_;
  int64_t val_max_batches_ = -1;  // overfit_batches: validate on the same batches it trains on
  int64_t val_check_batch_ = 0;  // validate after every this many training batches
  bool validation_enabled_ = false;
  bool time_up_ = false;  // max_time reached, as decided by global rank 0
  // --cuda-graph: the captured step, from the start of training to the end of the fit.
  std::unique_ptr<CapturedTraining> captured_;
  // --fault-tolerance: this replica's part in the quorums; the step being run and where it leaves
  // the epoch's position when it commits.
  std::unique_ptr<FaultTolerantReplicas> replicas_;
  FaultTolerantReplicas::Step replica_step_;
  int64_t replica_first_batch_ = 0;
};

}  // namespace volt
