#pragma once
// Note [A model part sharded over its replicas]
// `data_parallel=fsdp` of the pipeline and tensor_parallel strategies: the ranks holding the same
// part of the model (a pipeline stage, a tensor-parallel rank's slices), its `dp` group, shard it
// as fsdp does, one unit per part, in the per-parameter layout (FSDP2's: each parameter cut on its
// first dimension, fsdp's ShardLayout::PerParameter, Note [Per-parameter layout]). Between steps
// each rank holds 1/dp of its part's parameters, their gradients and the optimizer's state for
// them; the optimizer steps those shards (fsdp's optimizer surgery, shard_param_groups.h).
//
// A step gathers the part once, before its first forward, and keeps it through the step's
// backwards (FSDP2's reshard_after_forward=False: a pipeline schedule runs every micro-batch's
// forward and backward in one step, so resharding between them would gather the stage 2M times;
// torchtitan shards pipeline stages so). At the synchronization (outside no_sync(); under it the
// whole gradients accumulate and the parameters stay gathered, as fsdp's no_sync does) the
// gradients are reduce-scattered over `dp` into the shards, averaged, and the gathered
// parameters freed. Clipping sums every rank's shards. A checkpoint gathers the part while its
// entries are read, a load writes each rank's part back into its shards, and the optimizer's
// state is gathered over `dp` in PyTorch's layout (flat_optimizer_state.h) before the strategy
// puts the parts together.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/scope_guard.h"
#include "distributed/communicator.h"
#include "strategies/fsdp/flat_parameter.h"
#include "strategies/fsdp/shard_param_groups.h"

namespace volt {

// How the replicas of a model part share it (the strategies' data_parallel= option).
enum class ReplicaDataParallel {
  DDP,   // each holds the part whole; gradients averaged over `dp`
  FSDP,  // each holds 1/dp of it
};

class ReplicaShards {
 public:
  // `parameters`: the part's, under the module's names (equal on the ranks of `group`); `group`:
  // the part's replicas; `owner`: the part in errors ("pipeline stage 1"). Leaves them released.
  ReplicaShards(std::vector<std::pair<std::string, torch::Tensor>> parameters, Communicator& group, std::string owner);

  const fsdp::FlatParameter& flat() const { return *flat_; }
  const std::string& owner() const { return owner_; }
  bool gathered() const { return flat_->gathered(); }
  // The part's parameters whole (nothing when they are). [collective over dp, unless gathered]
  void gather();
  // gather() until the guard ends, then released again if they were released before.
  // [collective over dp]
  ScopeGuard gathered_while();
  // The parameters' gradients averaged into the shards' (added to what they hold), then the
  // gathered parameters freed. [collective over dp]
  void reduce_gradients();
  // After the gathered parameters were written (a checkpoint's load): this rank's part of them
  // into its shards.
  void store_gathered_into_shards();
  // The parameters whole again, tensors of their own; this object is not used after it.
  // [collective over dp]
  void restore();
  // Elements of the shards this rank holds (padding included), for measurements.
  int64_t shard_numel() const { return flat_->shard_numel(); }

  // Replaces the part's parameters in `optimizers` by this rank's shards (fsdp's optimizer
  // surgery; `strategy` names the caller in errors, "--strategy pipeline"), keeping what each
  // optimizer's groups held for its checkpoints.
  void take_optimizers(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                       const std::string& strategy);
  // What take_optimizers replaced, by optimizer (empty before it).
  const fsdp::OptimizerLayouts& optimizer_layouts() const { return optimizer_layouts_; }

 private:
  std::unique_ptr<fsdp::FlatParameter> flat_;
  fsdp::OptimizerLayouts optimizer_layouts_;
  Communicator& group_;
  std::string owner_;
};

}  // namespace volt
