#pragma once
// An optimizer that steps FSDP's flat shards, converted to and from PyTorch's optimizer layout
// over the model's own parameters (optimizer_state.h), so that a full checkpoint of an `fsdp` run
// resumes under `ddp`, `single_device` or `fsdp` at another world size, and theirs under `fsdp`.
//
// The layout of each param group is recorded when fsdp replaces the user's parameters by shards
// (setup_optimizers): the parameters as configure_optimizers gave them, each either an entry of a
// unit (stepped through the unit's shard) or a parameter stepped as it is. Per-element state
// (Adam's exp_avg, SGD's momentum_buffer: tensors of the shard's size) is all-gathered and cut
// into each parameter's shape; anything else (Adam's step) is the same for every parameter of
// the unit and copied, a tensor cloned for each (PyTorch's Adam increments it in place).
// Loading takes each rank's slice of the per-parameter state, read a parameter at a time. In the
// per-parameter layout (Note [Per-parameter layout]) each stepped tensor is one parameter's shard,
// and the same code gathers and cuts one parameter's rows.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/state_dict.h"
#include "strategies/fsdp/flat_parameter.h"

namespace volt {
class ShardedCheckpoint;
}

namespace volt::fsdp {

// Parameters sharded together: a FlatParameter (an fsdp unit's, or a pipeline stage's) and what
// errors call it ("fsdp unit 'head.1'").
struct ShardedParameters {
  const FlatParameter* flat = nullptr;
  std::string owner;
};

// One parameter of a param group as configure_optimizers gave it.
struct OriginalParameter {
  const FlatParameter* flat = nullptr;  // null: stepped as it is (not sharded)
  size_t entry = 0;                     // the flat parameter's entry
  size_t stepped = 0;                   // its tensor in the group after setup: the shard, or itself
  std::string owner;                    // the ShardedParameters' owner
};
using GroupLayout = std::vector<OriginalParameter>;

// PyTorch's layout of `optimizer` (which steps shards) over the original parameters, complete on
// global rank `root`, whose per-element state alone is gathered (Note [A full save gathers to
// rank 0] in strategies/fsdp/fsdp_checkpoint_state.cpp): the other ranks get the layout without it.
// [collective]
StateDict consolidate_optimizer_state(torch::optim::Optimizer& optimizer, const std::vector<GroupLayout>& groups,
                                      int64_t root);

// Loads PyTorch's layout over the original parameters into `optimizer` (which steps shards):
// each rank takes its shard's slice (Note [Loading a slice] in flat_slice.h). `state`'s tensors may
// be placeholders of `source`. `what` names it in errors.
void load_consolidated_optimizer_state(torch::optim::Optimizer& optimizer, const std::vector<GroupLayout>& groups,
                                       const StateDict& state, const std::string& what,
                                       const ShardedCheckpoint* source = nullptr);

}  // namespace volt::fsdp
