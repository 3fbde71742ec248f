#pragma once
// The pipeline strategy's checkpoint part (Note [The pipeline strategy]): the whole model under its
// own names, each stage's entries gathered from the ranks that hold them (the first data-parallel
// replica's), so that any strategy loads it; a load copies each rank's entries out of a whole
// model's state. The optimizers' state is the default's over OSS (consolidated in PyTorch's layout),
// or with data_parallel=fsdp each stage's shards consolidated over its `dp` group, then merged over
// the stages (Note [A model part sharded over its replicas]).
#include "strategies/checkpoint_state.h"
#include "strategies/part_context.h"

namespace volt {

struct PipelineLayout;

class PipelineCheckpointState : public CheckpointState {
 public:
  // `layout`: the strategy's, read when the part acts (before setup_module: the defaults').
  PipelineCheckpointState(const PartContext& context, ProcessGroupContext& group, const PipelineLayout& layout)
      : CheckpointState(context, CheckpointLayout::Full), group_(group), layout_(layout) {}

  // Complete on global rank 0; the other ranks' own (released) view. [collective]
  StateDict model_state_dict(torch::nn::Module& module, CheckpointLayout layout) override;
  // Complete on every rank. [collective]
  StateDict full_model_state_dict(torch::nn::Module& module) override;
  void load_model_state_dict(torch::nn::Module& module, const StateDict& state, CheckpointLayout layout, bool strict,
                             const std::string& source, const ShardedCheckpoint* slices) override;
  // data_parallel=fsdp: complete on global rank 0. [collective] (otherwise: the default's)
  StateDict optimizer_state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout) override;
  void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state, CheckpointLayout layout,
                                 const std::string& what, const ParameterNamer& name_of,
                                 const ShardedCheckpoint* slices) override;
  // A released parameter's gradient is the whole parameter's shape on the stage that holds it.
  std::vector<int64_t> held_gradient_shape(const std::string& name, const torch::Tensor& parameter) const override;

 private:
  // This rank's share of the model: its stage's entries on the first replica, nothing elsewhere.
  // [collective over dp with data_parallel=fsdp: the stage is gathered while it is read]
  StateDict contribution() const;
  // The shares merged in `module`'s order.
  static StateDict merged(const torch::nn::Module& module, const std::vector<StateDict>& shares);

  ProcessGroupContext& group_;
  const PipelineLayout& layout_;
};

}  // namespace volt
