#pragma once
// The tensor_parallel strategy's checkpoint part (Note [The tensor_parallel strategy]): the whole
// model and the whole optimizer state in PyTorch's layout, each split parameter (and each state
// tensor of its slice's shape: Adam's moments, SGD's momentum) gathered over its `tp` group; a
// load cuts this rank's slice out of the whole values, so any strategy's full checkpoint loads.
// With data_parallel=fsdp the slices are gathered over `dp` while they are read or written, and
// their optimizer state is consolidated over `dp` first (Note [A model part sharded over its
// replicas]).
#include "core/scope_guard.h"
#include "strategies/checkpoint_state.h"

namespace volt {

class TensorParallelLayout;

class TensorParallelCheckpointState : public CheckpointState {
 public:
  TensorParallelCheckpointState(const PartContext& context, const TensorParallelLayout& layout)
      : CheckpointState(context, CheckpointLayout::Full), layout_(layout) {}

  // Whole on every rank (the gathers are within `tp` groups). [collective]
  StateDict model_state_dict(torch::nn::Module& module, CheckpointLayout layout) override;
  void load_model_state_dict(torch::nn::Module& module, const StateDict& state, CheckpointLayout layout, bool strict,
                             const std::string& source, const ShardedCheckpoint* slices) override;
  StateDict optimizer_state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout) override;  // [collective]
  void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state, CheckpointLayout layout,
                                 const std::string& what, const ParameterNamer& name_of,
                                 const ShardedCheckpoint* slices) override;

 private:
  // data_parallel=fsdp: the parameters gathered until the guard ends. [collective over dp]
  ScopeGuard gathered_while() const;
  const TensorParallelLayout& layout_;
};

}  // namespace volt
