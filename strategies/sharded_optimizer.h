#pragma once
// An optimizer whose state is spread over the ranks (volt::OSS): what a strategy's
// OptimizerSharding part (optimizer_sharding.h) needs from it, so that the checkpoint and clipping
// parts handle any such optimizer without knowing its type.
#include <torch/torch.h>

#include <string>

#include "checkpoint/optimizer_state.h"
#include "core/state_dict.h"

namespace volt {

class ShardedOptimizer {
 public:
  virtual ~ShardedOptimizer() = default;

  // The whole optimizer's state in PyTorch's layout (state by parameter index across every
  // parameter group, param_groups), every rank's shard consolidated on `root`; an empty dict on
  // the other ranks. Loadable by the unsharded optimizer, and by this one at any world size.
  // [collective]
  virtual StateDict consolidated_state_dict(int64_t root = 0) = 0;
  // The same layout holding only this rank's shard (a sharded checkpoint).
  virtual StateDict shard_state_dict() const = 0;
  // Takes this rank's shard out of either layout; the groups' options (lr, ...) from it too.
  virtual void load_sharded_or_consolidated_state_dict(const StateDict& state, const std::string& what,
                                                       const ParameterNamer& name_of) = 0;
  // Clips the gradients of the parameters this optimizer steps to a total `norm_type`-norm of
  // `max_norm` over every rank's shard (each parameter counted once); returns the norm before
  // clipping (a 0-dim tensor, not read on the host). [collective]
  virtual torch::Tensor clip_grad_norm(double max_norm, double norm_type) = 0;
};

}  // namespace volt
