#pragma once
// The checkpoint part (checkpoint_state.h) of FSDP.
// Model, Full: every parameter unsharded under its name (gathered on every rank), with the
// buffers; Sharded: each unit's shard ("<unit>.flat_shard", the root's "flat_shard") and the
// buffers. Optimizer, Full: PyTorch's layout over the model's parameters (flat_optimizer_state.h),
// on every rank; Sharded: the optimizer's own state (its shards'). A full layout is loaded a slice
// at a time (Note [Loading a slice] in flat_slice.h), also from another layout's sharded
// checkpoint (reads_slices). It reads the units and layouts from the strategy's FSDPState (Note
// [FSDP's state]).
#include <memory>

#include "strategies/checkpoint_state.h"
#include "strategies/fsdp/fsdp_state.h"

namespace volt {

class FSDPCheckpointState : public CheckpointState {
 public:
  FSDPCheckpointState(const PartContext& context, CheckpointLayout layout, std::shared_ptr<fsdp::FSDPState> state);

  StateDict model_state_dict(torch::nn::Module& module, CheckpointLayout layout) override;  // [collective]
  void load_model_state_dict(torch::nn::Module& module, const StateDict& state, CheckpointLayout layout, bool strict,
                             const std::string& source, const ShardedCheckpoint* slices) override;
  StateDict optimizer_state_dict(torch::optim::Optimizer& optimizer,
                                 CheckpointLayout layout) override;  // [collective for Full]
  void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state, CheckpointLayout layout,
                                 const std::string& what, const ParameterNamer& name_of,
                                 const ShardedCheckpoint* slices) override;
  // Each unit's flat shard (its slice and parameters) and each optimizer's layout over them.
  StateDict shard_index(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers) override;
  // The same units, flattened and sharded alike (min_num_params, the wrapping and the sharding
  // strategy decide them, not the name and world size alone).
  bool is_own_layout(const StateDict& shard) const override;
  StateDict full_model_state_dict(torch::nn::Module& module) override;
  // A unit's parameter is released between steps while its gradient of a window stays whole.
  std::vector<int64_t> held_gradient_shape(const std::string& name, const torch::Tensor& parameter) const override;
  bool reads_slices() const override { return true; }

 private:
  std::shared_ptr<fsdp::FSDPState> state_;
};

}  // namespace volt
