#pragma once
// Note [A stage sharded over its replicas]
// `--strategy pipeline:data_parallel=fsdp`: the replicas of a stage (its `dp` group) shard it as
// FSDP does, one unit per stage, in the per-parameter layout (FSDP2's: each parameter cut on its
// first dimension, fsdp's ShardLayout::PerParameter, Note [Per-parameter layout]). Between steps
// each rank holds 1/dp of its stage's parameters, their gradients and the optimizer's state for
// them; the optimizer steps those shards (fsdp's optimizer surgery, shard_param_groups.h).
//
// A step gathers the stage's parameters once, before its first micro-batch, and keeps them for
// all of them (FSDP2's reshard_after_forward=False, as torchtitan shards pipeline stages: a
// schedule runs every micro-batch's forward and backward in one step, so resharding between them
// would gather the stage 2M times). At the synchronization (outside no_sync(); under it the whole
// gradients accumulate and the parameters stay gathered, as FSDP's no_sync does) the gradients
// are reduce-scattered over `dp` into the shards, averaged, and the gathered parameters are freed.
// Clipping sums every rank's shards (every stage, every replica). A checkpoint gathers the stage
// for the moment its entries are read, and a load writes each rank's part back into its shards;
// the optimizer's state is gathered per stage over `dp` in PyTorch's layout
// (flat_optimizer_state.h), then merged over the stages.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/scope_guard.h"
#include "distributed/communicator.h"
#include "strategies/fsdp/flat_parameter.h"

namespace volt::pipeline {

class StageShards {
 public:
  // `parameters`: the stage's own, under the module's names (gathered, equal on the ranks of
  // `group`); `group`: the stage's replicas. Leaves them released.
  StageShards(std::vector<std::pair<std::string, torch::Tensor>> parameters, Communicator& group, int64_t stage);

  const fsdp::FlatParameter& flat() const { return *flat_; }
  std::string owner() const { return "pipeline stage " + std::to_string(stage_); }
  bool gathered() const { return flat_->gathered(); }
  // The stage's parameters whole (nothing when they are). [collective over dp, unless gathered]
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

 private:
  std::unique_ptr<fsdp::FlatParameter> flat_;
  Communicator& group_;
  int64_t stage_;
};

}  // namespace volt::pipeline
