#pragma once
// A part of the Strategy (strategy.h): what a checkpoint holds of the model, the optimizers, the
// gradients of an open accumulation window and the strategy itself, in the layout the strategy
// chooses (Note [Checkpoint layouts], checkpoint_files.h). The defaults suit a strategy that keeps
// every tensor whole on every rank, its optimizers' state consolidated when the strategy shards
// it (Strategy::shards_optimizer_state); a parameter-sharding strategy consolidates for Full and
// writes its own shard for Sharded.
//
// [collective]: every rank calls it at the same point; "for strategies that shard" means the
// default needs no communication.
#include <torch/torch.h>

#include <memory>
#include <string>

#include "checkpoint/checkpoint_layout.h"
#include "checkpoint/optimizer_state.h"
#include "core/state_dict.h"

namespace volt {

class ShardedCheckpoint;
class PartContext;

class CheckpointState {
 public:
  // `context`: the strategy that holds this part and outlives it, as much of it as a part may
  // read (Note [Part context]).
  explicit CheckpointState(const PartContext& context, CheckpointLayout layout = CheckpointLayout::Full)
      : context_(context), layout_(layout) {}
  virtual ~CheckpointState() = default;

  // The layout this strategy writes.
  CheckpointLayout layout() const { return layout_; }

  // What a checkpoint of `layout` holds of the module: its parameters and buffers, tensors on any
  // device (the file stores CPU copies). In the Full layout it is complete on global rank 0, which
  // writes it; a strategy that shards parameters leaves the other ranks their released (empty)
  // tensors rather than gather the model on each (Note [A full save gathers to rank 0] in
  // strategies/fsdp/fsdp_checkpoint_state.cpp). [collective for strategies that shard]
  virtual StateDict model_state_dict(torch::nn::Module& module, CheckpointLayout layout);
  // The module's parameters and buffers whole on every rank (tests, exports that every rank
  // needs). [collective for strategies that shard]
  virtual StateDict full_model_state_dict(torch::nn::Module& module) {
    return model_state_dict(module, CheckpointLayout::Full);
  }
  // Loads `state` (of `layout`) into the module in place; `source` names it in errors. `slices`
  // reads the placeholders `state` holds (LoadedCheckpoint::slices; null: none), for a strategy
  // that reads_slices.
  virtual void load_model_state_dict(torch::nn::Module& module, const StateDict& state, CheckpointLayout layout,
                                     bool strict, const std::string& source,
                                     const ShardedCheckpoint* slices);
  // An optimizer's state in `layout` (the Full layout: complete on global rank 0, as above).
  // [collective for strategies that shard]
  virtual StateDict optimizer_state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout);
  virtual void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state,
                                         CheckpointLayout layout, const std::string& what,
                                         const ParameterNamer& name_of, const ShardedCheckpoint* slices);

  // The gradients accumulated so far in an open accumulation window, which the step at the
  // window's end needs (ranks differ: each accumulated its own micro-batches). The result's keys
  // go into the checkpoint's fit-loop section: "accumulated_grads" (this process's, or this
  // rank's shard) or, for a Full checkpoint of several ranks, "accumulated_grads_per_rank" (every
  // rank's, for global rank 0 to write). [collective with several ranks]
  virtual StateDict accumulated_gradients(torch::nn::Module& module, CheckpointLayout layout);
  // Sets the gradients from such a section: this rank's entry, none when the section has none.
  // Warns and drops them when the section was written by another number of ranks.
  virtual void load_accumulated_gradients(torch::nn::Module& module, const StateDict& section,
                                          const std::string& source);
  // The shape of the gradient `parameter` (named `name`) holds inside a window: its own, unless
  // the strategy keeps it released between steps with its gradient whole (fsdp under no_sync).
  virtual std::vector<int64_t> held_gradient_shape(const std::string& name, const torch::Tensor& parameter) const {
    return parameter.sizes().vec();
  }

  // The strategy's own section (comm-hook state, model-averager step, SlowMo buffers) in
  // `layout`: for Full, what differs per rank is gathered for global rank 0 to write. Restored
  // only into a strategy of the same name. [collective]
  virtual StateDict strategy_state_dict(CheckpointLayout layout) { return {}; }
  // The index a Sharded checkpoint carries so that any strategy at any world size can put its
  // shards together (Note [Reading a sharded checkpoint anywhere] in
  // checkpoint/sharded_checkpoint.h). The default: no flat tensors, and each optimizer's state
  // replicated or, when the strategy shards it, partitioned.
  virtual StateDict shard_index(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers);
  // Whether `shard`, a shard this strategy's name wrote at this world size, also has this run's
  // layout, so that this rank can take it as its own; otherwise the shards are put together and
  // each rank reads what it owns (Note [Reading a sharded checkpoint anywhere]). The default: yes
  // (a layout that follows from the name and the world size alone).
  virtual bool is_own_layout(const StateDict& shard) const { return true; }
  virtual void load_strategy_state_dict(const StateDict& state, CheckpointLayout layout) {}

  // Whether this strategy loads a sharded checkpoint of another layout by reading only the slices
  // it owns (Note [Reading a sharded checkpoint anywhere]): the full layout it then receives holds
  // placeholders for the model's and optimizers' tensors, which the loads above read through
  // their `slices`.
  virtual bool reads_slices() const { return false; }

 protected:
  const PartContext& context() const { return context_; }

 private:
  const PartContext& context_;
  CheckpointLayout layout_;
};

}  // namespace volt
