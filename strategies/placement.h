#pragma once
// A part of the Strategy (strategy.h): where a run's processes, devices, data and forwards go.
// The Trainer asks it, before the run's processes exist, how many devices each process drives
// (devices_per_process: one process per device by default, all of a node's devices in one for a
// strategy that replicates the model inside its process); then, per loader, for this rank's
// sampler; per batch, for the batch on the device; per step, for the region its forward runs in.
#include <torch/torch.h>

#include <memory>

#include "core/run_stage.h"
#include "core/scope_guard.h"
#include "data/batch.h"
#include "data/data_loader.h"

namespace volt {

class PartContext;

class Placement {
 public:
  // `context`: the strategy that holds this part and outlives it, as much of it as a part may
  // read (Note [Part context]).
  explicit Placement(const PartContext& context) : context_(context) {}
  virtual ~Placement() = default;

  // Of the `devices_per_node` the user asked for (--devices), how many one process drives; it
  // must divide them (the node then runs devices_per_node / devices_per_process processes).
  virtual int64_t devices_per_process(int64_t devices_per_node) const { return 1; }
  // The loader this rank draws `stage`'s batches from: `loader` itself on one process; otherwise
  // a copy with this rank's sampler (the user's loader is never changed), or over this rank's
  // share of a dataset that deals itself (Dataset::share_of_rank, a stream). Training gets
  // DistributedSampler's equal, padded shares. Evaluation gets an unpadded split, so that every
  // sample counts once in the metrics, unless evaluation_needs_equal_steps(): then padded
  // shares, sequential, so that every rank runs the same number of steps (a sharded strategy's
  // forward has collectives); up to world_size - 1 samples then count twice, as in PyTorch's.
  virtual std::shared_ptr<DataLoader> distribute_loader(std::shared_ptr<DataLoader> loader, RunningStage stage) const;
  // The batch on the strategy's root device, its floating-point tensors in the precision's input
  // dtype. `non_blocking`: copies from page-locked memory return before they are done, ordered on
  // the current CUDA stream (how DeviceFeed uploads the next batch during a step).
  virtual Batch batch_to_device(const Batch& batch, bool non_blocking = false) const;
  // The region in which a step of `stage` runs its forward: the precision's autocast, plus a
  // strategy's pre-forward work (DDP's buffer broadcast, FSDP's gather of the root unit).
  // [collective for such strategies]
  virtual ScopeGuard forward_context(RunningStage stage);
  // Whether evaluation steps run collectives, so that every rank must run as many of them.
  virtual bool evaluation_needs_equal_steps() const { return false; }

  // Which of how many data-parallel replicas this rank is: distribute_loader gives the ranks of
  // one replica the same batches. Every rank is a replica of its own by default; the ranks of a
  // pipeline, which run one batch together, are one.
  struct DataReplica {
    int64_t index = 0;
    int64_t count = 1;
  };
  virtual DataReplica data_replica() const;

 protected:
  const PartContext& context() const { return context_; }

 private:
  const PartContext& context_;
};

}  // namespace volt
