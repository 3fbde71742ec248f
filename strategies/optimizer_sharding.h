#pragma once
// A part of a strategy whose optimizers are ShardedOptimizers (sharded_optimizer.h: volt::OSS,
// which ddp:shard_optimizer and ddp_sharded wrap the user's optimizers in): what the checkpoint
// and gradients parts ask of such an optimizer, answered over every rank's shard. A strategy
// holds one (Strategy::hold) exactly when it shards optimizer state; the default parts ask it
// instead of testing the optimizer's type, and a strategy without one keeps whole optimizers.
#include <torch/torch.h>

#include <string>

#include "checkpoint/checkpoint_layout.h"
#include "checkpoint/optimizer_state.h"
#include "core/state_dict.h"

namespace volt {

class ShardedOptimizer;

class OptimizerSharding {
 public:
  // `strategy` names the strategy in errors.
  explicit OptimizerSharding(std::string strategy) : strategy_(std::move(strategy)) {}

  // The optimizer's state in `layout`: Full, every shard consolidated on global rank 0 (an empty
  // dict elsewhere); Sharded, this rank's shard. [collective for Full]
  StateDict state_dict(torch::optim::Optimizer& optimizer, CheckpointLayout layout) const;
  // Takes this rank's shard out of either layout.
  void load_state_dict(torch::optim::Optimizer& optimizer, const StateDict& state, const std::string& what,
                       const ParameterNamer& name_of) const;
  // Clips to a total `norm_type`-norm of `max_norm` over every rank's shard, each parameter once;
  // returns the norm before clipping (0-dim, not read on the host). [collective]
  torch::Tensor clip_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) const;

 private:
  // `optimizer` as a ShardedOptimizer, or a ConfigurationError saying to pass the optimizers the
  // strategy set up: the one type test of a sharded optimizer.
  ShardedOptimizer& sharded(torch::optim::Optimizer& optimizer) const;

  std::string strategy_;
};

}  // namespace volt
